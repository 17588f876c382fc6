"""One backend's fuzzing loop, run in its own process by fuzz.campaign (python -m fuzz.worker).

Before each kernel call the worker writes its case to a heartbeat file, so that if the kernel
kills the process or hangs, the parent knows which case did it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch
from hypothesis import HealthCheck, Phase, given, seed, settings

from backends.registry import get
from reference.case import Case

from .campaign import HEARTBEAT, STICKY_EXIT, append_row
from .compare import Evaluation, Verdict, base_row, evaluate
from .ledger import known_for
from .strategies import Limits, cases


class _Found(AssertionError):
    pass


def save_case(out: Path, backend: str, case_json: str, verdict: str, evaluation: Evaluation | None = None) -> str:
    """Write cases/<backend>-<hash>.json (case, verdict, replay command) and, with tensors, a .pt."""
    digest = hashlib.sha1(case_json.encode()).hexdigest()[:10]
    stem = f"{backend}-{digest}"
    path = out / "cases" / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"backend": backend, "verdict": verdict, "case": json.loads(case_json),
               "replay": f"attnref replay {path} --backend {backend}"}
    if evaluation is not None:
        payload["row"] = {k: v for k, v in evaluation.row.items() if k != "case"}
        tensors = {"expected_output": evaluation.expected.output.cpu() if evaluation.expected else None,
                   "expected_lse": evaluation.expected.lse.cpu() if evaluation.expected else None,
                   "actual_output": evaluation.actual.output.detach().cpu() if evaluation.actual else None,
                   "actual_lse": None if evaluation.actual is None or evaluation.actual.lse is None
                   else evaluation.actual.lse.detach().cpu(),
                   "query_start_loc": evaluation.inputs.query_start_loc.cpu() if evaluation.inputs else None}
        torch.save(tensors, out / "cases" / f"{stem}.pt")
    path.write_text(json.dumps(payload, indent=2))
    return str(path)


_STICKY = ("illegal memory access", "device-side assert", "unspecified launch failure", "misaligned address",
           "an illegal instruction")


def sticky_device_error(message: str) -> bool:
    """CUDA errors after which the process's CUDA context cannot be used again."""
    return any(s in message for s in _STICKY)


def fuzz_backend(backend_name: str, out: Path, *, examples: int | None, seconds: float | None, seed_value: int,
                 specs: tuple[str, ...] = (), limits: Limits = Limits()) -> None:
    backend = get(backend_name, include_mutants=True, specs=specs)
    strategy = cases(backend.caps, limits)
    heartbeat = out / f"{backend_name}.{HEARTBEAT}"
    deadline = None if seconds is None else time.monotonic() + seconds
    state = {"generated": 0, "phase": "generate", "failure": None, "index": 0}

    def over_budget() -> bool:
        if examples is not None and state["generated"] >= examples:
            return True
        return deadline is not None and time.monotonic() >= deadline

    def one(case: Case) -> None:
        if state["phase"] == "generate" and over_budget():
            return
        if state["phase"] == "generate":
            state["generated"] += 1
        state["index"] += 1
        known = known_for(backend_name, case)
        if known is not None and known.crashes:
            evaluation = None
            row = base_row(backend, case)
            row.update(verdict=Verdict.CRASH.value, message=f"known crash, not launched: {known.summary}",
                       known_issue=known.link)
        else:
            heartbeat.write_text(json.dumps({"case": case.to_json(), "started": time.time()}))
            evaluation = evaluate(backend, case)
            heartbeat.unlink(missing_ok=True)
            row = evaluation.row
            if known is not None:
                failing = Verdict(row["verdict"]).is_failure
                if not failing or known.explains(row.get("message", "")):
                    row["known_issue"] = known.link
                if not failing:
                    row["known_fixed"] = True
        row.update(phase=state["phase"], example=state["index"], t=time.time())
        append_row(out, row)
        if row["verdict"] == Verdict.CRASH.value and sticky_device_error(row.get("message", "")):
            # The CUDA context is now unusable: every later case in this process would crash and be
            # blamed. Save this case unshrunk and let the campaign start a fresh worker.
            path = save_case(out, backend_name, row["case"], row["verdict"], evaluation)
            append_row(out, dict(row, phase="minimal", case_file=path, t=time.time(),
                                 note="not shrunk: sticky CUDA error (the context is unusable afterwards)"))
            os._exit(STICKY_EXIT)
        if Verdict(row["verdict"]).is_failure and "known_issue" not in row:
            state["phase"] = "shrink"
            state["failure"] = (row, evaluation)
            raise _Found(row["verdict"])

    round_no = 0
    while not over_budget():
        state.update(phase="generate", failure=None)
        batch = 100 if examples is None else max(1, min(100, examples - state["generated"]))
        test = settings(max_examples=batch, database=None, deadline=None, derandomize=False,
                        phases=[Phase.generate, Phase.shrink], report_multiple_bugs=False,
                        suppress_health_check=list(HealthCheck))(
            seed(seed_value + round_no)(given(strategy)(one)))
        round_no += 1
        try:
            test()
        except _Found:
            pass
        except Exception:  # hypothesis may wrap our _Found; a real harness error has no failure recorded
            if state["failure"] is None:
                raise
        if state["failure"] is not None:
            row, evaluation = state["failure"]
            path = save_case(out, backend_name, row["case"], row["verdict"], evaluation)
            minimal = dict(row, phase="minimal", case_file=path, t=time.time())
            append_row(out, minimal)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz.worker")
    p.add_argument("--backend", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--examples", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--spec", action="append", default=[])
    p.add_argument("--limits", default="{}")
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    fuzz_backend(a.backend, a.out, examples=a.examples, seconds=a.seconds, seed_value=a.seed,
                 specs=tuple(a.spec), limits=Limits(**json.loads(a.limits)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
