"""Backends that misbehave on purpose, loaded by tests through --backend-spec module:attr."""
from __future__ import annotations

import ctypes
import os
import time

from backends.naive import NaivePaged


class Segfaults(NaivePaged):
    """Kills its process (SIGSEGV) on any case with two or more sequences."""

    def __init__(self):
        super().__init__()
        self.name = "test-segfaults"

    def run(self, inputs):
        if len(inputs.case.sequences) >= 2:
            ctypes.string_at(0)  # dereference NULL: the process dies, as a faulting kernel would
        return super().run(inputs)


class Hangs(NaivePaged):
    """Never returns on any case with two or more sequences."""

    def __init__(self):
        super().__init__()
        self.name = "test-hangs"

    def run(self, inputs):
        if len(inputs.case.sequences) >= 2:
            time.sleep(3600)
        return super().run(inputs)


def all_crashy():
    return [Segfaults(), Hangs()]


del os
