"""The live progress line: per backend, examples/s, failures and buckets, from the driver's counters.

Nothing is re-read from disk: the driver calls `row()` for each row it writes. On a terminal the
line is redrawn in place; elsewhere (CI logs) a line is printed every `every` seconds.
"""
from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, every: float = 15.0, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = 1.0 if self.tty else every
        self.enabled = enabled
        self.start = time.monotonic()
        self.generated: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.known: Counter[str] = Counter()
        self.buckets: dict[str, set[str]] = defaultdict(set)
        # JIT backends (campaign.compiles): compile keys built, cases waiting for one, row time spent building
        self.keys: dict[str, set[str]] = defaultdict(set)
        self.waiting: Counter[str] = Counter()
        self.row_s: Counter[str] = Counter()
        self.compile_s: Counter[str] = Counter()
        self.paused: set[str] = set()  # backends whose new builds pause (campaign.budget's allowance)
        self._last = 0.0

    def deferred(self, backend: str) -> None:
        self.waiting[backend] += 1

    def row(self, row: dict, bucket: str | None = None) -> None:
        backend = row.get("backend", "?")
        if row.get("compile_key"):
            self.keys[backend].add(row["compile_key"])
            spent = sum(row.get(k) or 0.0 for k in ("materialize_s", "oracle_s", "kernel_s", "compare_s"))
            self.row_s[backend] += spent
            if row.get("first_of_key"):
                self.compile_s[backend] += row.get("kernel_s") or 0.0
        if row.get("deferred") and self.waiting[backend]:
            self.waiting[backend] -= 1
        if row.get("phase") == "generate":
            self.generated[backend] += 1
            if row.get("verdict") in ("mismatch", "nan", "contract", "crash", "timeout"):
                (self.known if row.get("known_issue") else self.failures)[backend] += 1
        if bucket:
            self.buckets[backend].add(bucket)

    def line(self) -> str:
        now = time.monotonic()
        parts = []
        for backend in sorted(self.generated):
            rate = self.generated[backend] / max(now - self.start, 1e-9)
            part = f"{backend} {self.generated[backend]} ({rate:.1f}/s)"
            if self.failures[backend] or self.known[backend]:
                part += f" fail={self.failures[backend]} buckets={len(self.buckets[backend])}"
                if self.known[backend]:
                    part += f" known={self.known[backend]}"
            if self.keys[backend]:  # a JIT backend: keys built, cases waiting for theirs, share of row time compiling
                share = self.compile_s[backend] / max(self.row_s[backend], 1e-9)
                part += f" keys={len(self.keys[backend])} waiting={self.waiting[backend]} compile={100 * share:.0f}%"
                if backend in self.paused:
                    part += " (builds paused: new values only)"
            parts.append(part)
        total = sum(self.generated.values())
        return f"[{now - self.start:6.0f}s] {total} examples ({total / max(now - self.start, 1e-9):.1f}/s): " + \
            " | ".join(parts)

    def tick(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and (now - self._last < self.every or not self.generated):
            return
        self._last = now
        text = self.line()
        if self.tty:
            self.stream.write("\r" + text[:max(40, 200)] + "\033[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
