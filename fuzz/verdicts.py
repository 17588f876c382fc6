"""Verdicts and symptoms: what a comparison can conclude, most severe first."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    PASS = "pass"
    MISMATCH = "mismatch"  # error above the tolerance limit
    NAN = "nan"  # NaN/Inf where the oracle is finite
    CONTRACT = "contract"  # a declared contract broken (buffer rows, empty rows, LSE convention)
    CRASH = "crash"  # the kernel raised, or its worker process died
    TIMEOUT = "timeout"  # the kernel hung past the per-example limit
    UNSUPPORTED = "unsupported"  # the backend (or its library) refused the case
    BLIND = "blind"  # passed, but its tolerance could not see a one-key mask shift: not a pass

    @property
    def is_failure(self) -> bool:
        return self in (Verdict.MISMATCH, Verdict.NAN, Verdict.CONTRACT, Verdict.CRASH, Verdict.TIMEOUT)


SEVERITY = (Verdict.NAN, Verdict.MISMATCH, Verdict.CONTRACT)  # most severe first


@dataclass(frozen=True)
class Symptom:
    verdict: Verdict
    kind: str  # output, output-mean, output-nan, lse, lse-nan, empty-row-output, empty-row-lse, buffer, *-shape
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"verdict": self.verdict.value, "symptom": self.kind, "message": self.message}
