"""A correct CPU kernel with a JIT-like compile per (dtype, head size), for tests/campaign/test_compiles.py
(`--backend-spec tests.campaign.fake_jit:backends`): the first call of a key sleeps COMPILE_S unless a marker file in
$FAKE_JIT_DIR says some process built it (a module cache on disk, as FA4's, FlashInfer's and Triton's are). Each build
appends "key start end" to $FAKE_JIT_DIR/builds.log, so a test can count builds per key and builds at once.
`test-fake-jit-variants` builds one module per attention type within a key, as FA4 and FlashInfer build finer
variants (Backend.jit_variant), each for VARIANT_COMPILE_S, and loads one another process built for VARIANT_LOAD_S
(logged to loads.log); `test-fake-jit-in-process-loads` is the same with loads that need no compile slot.
`test-fake-jit-shapes` also builds, inside any call, one kernel per new shape (head counts and window), as vLLM's
Triton kernels do, for SHAPE_COMPILE_S, and declares those fields (Backend.jit_shape_per: focused shards pin them);
`test-fake-jit-shapes-unpinned` is the same without the declaration. `test-fake-jit-pinned-variants` is the CuTe DSL's
case (FA4): a gated variant per (dtype, head size, GQA ratio, attention type), loaded in process, whose fields beyond
the key a focused shard pins (Backend.jit_shape_per), so a shard's first case may wait for its variant's build;
`test-fake-jit-failing-builds` is the same, with every float32 build failing after its compile time."""
from __future__ import annotations

import os
import time
from pathlib import Path

from backends.base import Actual, Backend
from backends.torch_sdpa import sdpa_backends

COMPILE_S = 0.4
VARIANT_COMPILE_S = 2.0
VARIANT_LOAD_S = 0.5  # FA4 loads a variant another process compiled in 2-5 s on an H100
SHAPE_COMPILE_S = 0.3  # a per-shape Triton build (vLLM's unified attention: ~1.4 s a slow call on an H200)
LOADED: set[str] = set()  # modules this process has run


class FakeJit(Backend):
    name = "test-fake-jit"
    library = "torch"
    description = "torch-sdpa-math behind a sleeping 'compile' per dtype and head size"
    compiled_per = ("dtypes", "head_sizes")

    def __init__(self) -> None:
        self.inner = next(b for b in sdpa_backends() if b.name == "torch-sdpa-math")
        self.caps = self.inner.caps

    compile_s = COMPILE_S
    load_s = 0.0  # loading a module another process built, once per process

    def module(self, case) -> str:
        return f"{case.dtype.value}-{case.head_size}-{case.value_size}"

    def run(self, inputs) -> Actual:
        case = inputs.case
        marker = Path(os.environ["FAKE_JIT_DIR"]) / self.module(case)
        if marker.name not in LOADED:
            started, log = time.time(), "loads.log"
            if not marker.exists():
                time.sleep(self.compile_s)
                marker.touch()
                log = "builds.log"
            else:
                time.sleep(self.load_s)
            LOADED.add(marker.name)
            if log == "builds.log" or self.load_s:
                with open(marker.parent / log, "a") as f:
                    f.write(f"{marker.name} {started} {time.time()}\n")
        return self.inner.run(inputs)


class FakeJitVariants(FakeJit):
    name = "test-fake-jit-variants"
    compile_s = VARIANT_COMPILE_S
    load_s = VARIANT_LOAD_S

    def module(self, case) -> str:
        return f"{case.dtype.value}-{case.head_size}-{case.attn_type.value}"

    def jit_variant(self, case) -> tuple:
        return (case.dtype.value, case.head_size, case.attn_type.value)


class FakeJitInProcessLoads(FakeJitVariants):
    """Loads a variant another process built inside its own process (as FA4 does): Backend.loads_in_process."""

    name = "test-fake-jit-in-process-loads"
    loads_in_process = True


class FakeJitShapes(FakeJit):
    """A compile per (dtype, head size) as a first call's, and inside any call a build per new shape in this process
    (no marker: a Triton build is per process unless its disk cache has it; this stand-in keeps none)."""

    name = "test-fake-jit-shapes"
    jit_shape_per = ("heads", "windows")
    compiled_per = ("dtypes", "head_sizes")
    shapes: set[tuple] = set()

    def run(self, inputs) -> Actual:
        case = inputs.case
        shape = (case.dtype.value, case.head_size, case.num_heads, case.num_kv_heads, case.sliding_window)
        if (self.name, shape) not in self.shapes:
            self.shapes.add((self.name, shape))
            time.sleep(SHAPE_COMPILE_S)
            with open(Path(os.environ["FAKE_JIT_DIR"]) / "shapes.log", "a") as f:
                f.write(f"{self.name} {'/'.join(map(str, shape))}\n")
        return super().run(inputs)


class FakeJitShapesUnpinned(FakeJitShapes):
    name = "test-fake-jit-shapes-unpinned"
    jit_shape_per = ()


class FakeJitPinnedVariants(FakeJitInProcessLoads):
    name = "test-fake-jit-pinned-variants"
    jit_shape_per = ("heads", "attn_types")

    def module(self, case) -> str:
        return "-".join(map(str, self.jit_variant(case)))

    def jit_variant(self, case) -> tuple:
        return (case.dtype.value, case.head_size, case.num_heads // case.num_kv_heads, case.attn_type.value)


class FakeJitFailingBuilds(FakeJitPinnedVariants):
    """FA4's head-size pairs whose builds end in CUDADialectError: every variant of one dtype (float32) builds for
    VARIANT_COMPILE_S and then raises, so no built key covers its value (campaign.compiles.FAILED_BUILDS)."""

    name = "test-fake-jit-failing-builds"

    def run(self, inputs) -> Actual:
        case = inputs.case
        if case.dtype.value == "float32":
            time.sleep(self.compile_s)
            with open(Path(os.environ["FAKE_JIT_DIR"]) / "failed.log", "a") as f:
                f.write(f"{self.module(case)} {time.time()}\n")
            raise RuntimeError(f"build of {self.module(case)} failed (stand-in)")
        return super().run(inputs)


def backends():
    return [FakeJit(), FakeJitVariants(), FakeJitInProcessLoads(), FakeJitShapes(), FakeJitShapesUnpinned(),
            FakeJitPinnedVariants(), FakeJitFailingBuilds()]
