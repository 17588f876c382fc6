"""Backends that misbehave on purpose, loaded by tests through --backend-spec module:attr."""
from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

from backends.base import Feature
from backends.naive import NaivePaged


class _Misbehaves(NaivePaged):
    """The correct paged kernel, except on cases with an odd seed (about half; hypothesis' first, simplest
    draw has seed 0)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def misbehave(self) -> None:
        raise NotImplementedError

    def run(self, inputs):
        if inputs.case.seed % 2 == 1:
            self.misbehave()
        return super().run(inputs)


class Segfaults(_Misbehaves):
    def __init__(self):
        super().__init__("test-segfaults")

    def misbehave(self) -> None:
        ctypes.string_at(0)  # dereference NULL: the process dies, as a faulting kernel would


class Hangs(_Misbehaves):
    def __init__(self):
        super().__init__("test-hangs")

    def misbehave(self) -> None:
        time.sleep(3600)


class StickyError(_Misbehaves):
    """Raises what a CUDA kernel's illegal memory access looks like; afterwards every call fails too,
    as a poisoned CUDA context would (so a worker that went on would blame innocent cases)."""

    def __init__(self):
        super().__init__("test-sticky")
        self.poisoned = False

    def run(self, inputs):
        if self.poisoned:
            raise RuntimeError("CUDA error: unspecified launch failure (context poisoned earlier)")
        return super().run(inputs)

    def misbehave(self) -> None:
        self.poisoned = True
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class Slow(NaivePaged):
    """The correct kernel, 50 ms a call: campaigns long enough to interrupt."""

    def __init__(self):
        super().__init__()
        self.name = "test-slow"

    def run(self, inputs):
        time.sleep(0.05)
        return super().run(inputs)


class JitLike(NaivePaged):
    """The correct kernel, declared as compiled per dtype and head size (as FA4 is): its campaign shards
    are cut into compile slices."""

    compiled_per = ("dtypes", "head_sizes")
    compiled_features = (Feature.SINKS, Feature.SOFT_CAP)

    def __init__(self):
        super().__init__()
        self.name = "test-jit"


class CompilesFirst(JitLike):
    """The correct kernel, whose first call per dtype and head size in a process takes 3 s (a JIT compile)."""

    def __init__(self):
        super().__init__()
        self.name, self.compiled = "test-compiles", set()

    def run(self, inputs):
        key = (inputs.case.dtype, inputs.case.head_size)
        if key not in self.compiled:
            self.compiled.add(key)
            time.sleep(3.0)
        return super().run(inputs)


class HarnessError(NaivePaged):
    """The correct kernel, but checking a case's declaration raises in attnref's own path (a harness error): on every
    case, or ("once") on the first case of the campaign, which a marker file at $ATTNREF_TEST_MARKER records."""

    def __init__(self, once: bool):
        super().__init__()
        self.name = "test-harness-error-once" if once else "test-harness-error"
        self.once = once

    def not_supported_reasons(self, case):
        marker = Path(os.environ.get("ATTNREF_TEST_MARKER", "/nonexistent/marker"))
        if not self.once or not marker.exists():
            if self.once:
                marker.touch()
            raise KeyError("a bug in the harness")
        return super().not_supported_reasons(case)


def all_crashy():
    return [Segfaults(), Hangs(), StickyError(), Slow(), JitLike(), CompilesFirst(), HarnessError(once=True),
            HarnessError(once=False)]
