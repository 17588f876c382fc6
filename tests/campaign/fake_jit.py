"""A correct CPU kernel with a JIT-like compile per (dtype, head size), for tests/campaign/test_compiles.py
(`--backend-spec tests.campaign.fake_jit:backends`): the first call of a key sleeps COMPILE_S unless a marker file in
$FAKE_JIT_DIR says some process built it (a module cache on disk, as FA4's, FlashInfer's and Triton's are). Each build
appends "key start end" to $FAKE_JIT_DIR/builds.log, so a test can count builds per key and builds at once."""
from __future__ import annotations

import os
import time
from pathlib import Path

from backends.base import Actual, Backend
from backends.torch_sdpa import sdpa_backends

COMPILE_S = 0.4


class FakeJit(Backend):
    name = "test-fake-jit"
    library = "torch"
    description = "torch-sdpa-math behind a sleeping 'compile' per dtype and head size"
    compiled_per = ("dtypes", "head_sizes")

    def __init__(self) -> None:
        self.inner = next(b for b in sdpa_backends() if b.name == "torch-sdpa-math")
        self.caps = self.inner.caps

    def run(self, inputs) -> Actual:
        case = inputs.case
        marker = Path(os.environ["FAKE_JIT_DIR"]) / f"{case.dtype.value}-{case.head_size}-{case.value_size}"
        if not marker.exists():
            started = time.time()
            time.sleep(COMPILE_S)
            marker.touch()
            with open(marker.parent / "builds.log", "a") as log:
                log.write(f"{marker.name} {started} {time.time()}\n")
        return self.inner.run(inputs)


def backends():
    return [FakeJit()]
