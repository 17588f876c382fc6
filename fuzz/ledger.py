"""Known failures: each names the backend, a predicate over the Case, and the upstream issue.

A `crashes=True` entry is never launched (it would kill or poison the worker): its row is written
as a known crash straight away. Any other entry still runs; a failing row is marked known, and a
row that *passes* is flagged `known_fixed` so a stale entry gets noticed.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backends._convert import torch_before
from reference.case import Case, KVCacheDType


@dataclass(frozen=True)
class Finding:
    backend: str
    match: Callable[[Case], bool]
    link: str
    summary: str
    crashes: bool = False
    symptom: str | None = None  # regex on the failing row's message; None: any failure of a matching case

    def explains(self, message: str) -> bool:
        """Whether a failure with this message is this finding (not another bug on the same cases)."""
        import re

        return self.symptom is None or re.search(self.symptom, message or "") is not None

    def explains_row(self, row: dict) -> bool:
        """Whether every symptom of a failing row is this finding: a second symptom makes it new."""
        symptoms = row.get("symptoms") or [{"message": row.get("message", "")}]
        return all(self.explains(s.get("message", "")) for s in symptoms)


def _int4(case: Case) -> bool:
    return case.kv_cache_dtype == KVCacheDType.INT4_PER_TOKEN_HEAD


def _has_empty_side(case: Case) -> bool:
    return any(q == 0 or k == 0 for q, k in zip(case.query_lens, case.kv_lens))


KNOWN: tuple[Finding, ...] = (
    Finding("flex-flash-cuda", lambda c: torch_before(2, 12), "https://github.com/pytorch/pytorch/issues/181645",
            "flex_attention(BACKEND='FLASH', return_lse=True) returns LSE * ln 2: FA4's natural-log LSE is "
            "converted as if it were base 2 (found here on torch 2.11: error / |LSE| = 1 - ln 2 exactly; fixed "
            "upstream by pytorch#181824)", symptom=r"^LSE "),
    Finding("torch-sdpa-cpu-flash", _has_empty_side, "https://github.com/pytorch/pytorch/issues/141219",
            "SIGFPE (process killed) when a sequence has 0 queries or 0 keys; issue closed upstream, still "
            "reproduces on torch 2.13.0+cpu", crashes=True),
    *(Finding(name, lambda c: sum(c.kv_lens) == 0, "https://github.com/pytorch/pytorch/pull/147010",
              "flex_attention raises IndexError when the packed key length is 0")
      for name in ("flex", "flex-compiled", "flex-cuda", "flex-compiled-cuda")),
    Finding("vllm-pth-writes-cache", _int4, "https://github.com/vllm-project/vllm/issues/57014",
            "hadacore_transform (the Hadamard kernel of vLLM's int4 cache writer) reads stale shared memory for "
            "its last rows: codes 7-15 quanta off in about 1 of 10 int4 writes. The issue reports inputs over "
            "8,192 rows; on an H100 it also happens at 9-62 rows (tools/probe-hadacore.py)",
            symptom=r"int4 cache decodes"),
)


def known_for(backend: str, case: Case) -> Finding | None:
    for finding in KNOWN:
        if finding.backend == backend and finding.match(case):
            return finding
    return None
