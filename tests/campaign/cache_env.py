"""A correct CPU kernel that reports the compile-cache variables its worker process sees (in the row's notes), for
tests/campaign/test_caches.py: `--backend-spec tests.campaign.cache_env:backends`."""
from __future__ import annotations

import os

from backends.base import Actual, Backend
from backends.torch_sdpa import sdpa_backends

VARIABLES = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
             "FLASHINFER_WORKSPACE_BASE", "MAX_JOBS")


class CacheEnv(Backend):
    name = "test-cache-env"
    library = "torch"
    description = "torch-sdpa-math, noting the compile-cache variables of its process"

    def __init__(self) -> None:
        self.inner = next(b for b in sdpa_backends() if b.name == "torch-sdpa-math")
        self.caps = self.inner.caps

    def run(self, inputs) -> Actual:
        actual = self.inner.run(inputs)
        actual.notes.update({v: os.environ.get(v) for v in VARIABLES})
        return actual


def backends():
    return [CacheEnv()]
