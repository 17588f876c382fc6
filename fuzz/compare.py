"""Evaluate one Case on one backend: materialize, oracle, baseline, kernel, compare -> a Row.

A Row is a flat dict (one JSON line in rows.jsonl, one DataFrame row in reports/): the verdict,
every error metric the design names, the worst element, the timings and the Case itself.
"""
from __future__ import annotations

import math
import json
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import Tensor

from backends.base import Actual, Backend, Unsupported
from reference.attention import Expected, attention
from reference.case import Case
from reference.inputs import Inputs, materialize

from .blind import shift_by_one_key
from .tolerance import limits, rule_for


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


@dataclass
class Evaluation:
    row: dict[str, Any]
    inputs: Inputs | None = None
    expected: Expected | None = None
    actual: Actual | None = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def base_row(backend: Backend, case: Case) -> dict[str, Any]:
    return {
        "backend": backend.name, "library": backend.library, "case": case.to_json(),
        "features": ",".join(sorted(case.features())), "dtype": case.dtype.value,
        "kv_cache_dtype": case.kv_cache_dtype.value, "attn_type": case.attn_type.value,
        "layout": case.cache.layout.value if case.cache else "contiguous",
        "block_size": case.cache.block_size if case.cache else 0,
        "num_sequences": len(case.sequences), "num_tokens": case.num_tokens, "max_kv_len": case.max_kv_len,
        "num_heads": case.num_heads, "num_kv_heads": case.num_kv_heads, "head_size": case.head_size,
        "seed": case.seed,
    }


def evaluate(backend: Backend, case: Case, device: str | None = None, check_blind: bool = True) -> Evaluation:
    """Run `case` on `backend` and judge it against the oracle. Never raises for kernel errors."""
    row = base_row(backend, case)
    reasons = backend.not_supported_reasons(case)
    if reasons:
        row.update(verdict=Verdict.UNSUPPORTED.value, message="; ".join(reasons))
        return Evaluation(row)
    dev = torch.device(device or backend.device())
    t0 = time.perf_counter()
    inputs = materialize(case, dev)
    _sync(dev)
    t1 = time.perf_counter()
    expected = attention(inputs)
    baseline = attention(inputs, dtype=case.dtype.torch, reorder=True)
    _sync(dev)
    t2 = time.perf_counter()
    row.update(materialize_s=t1 - t0, oracle_s=t2 - t1)
    try:
        actual = backend.run(inputs)
        _sync(dev)
    except Unsupported as e:
        row.update(verdict=Verdict.UNSUPPORTED.value, message=f"library refused a declared case: {e}",
                   declaration_bug=True, kernel_s=time.perf_counter() - t2)
        return Evaluation(row, inputs, expected)
    except Exception as e:  # the kernel's error is a finding, not the harness's
        row.update(verdict=Verdict.CRASH.value, message=f"{type(e).__name__}: {e}"[:2000],
                   traceback=traceback.format_exc()[-4000:], kernel_s=time.perf_counter() - t2)
        return Evaluation(row, inputs, expected)
    t3 = time.perf_counter()
    row["kernel_s"] = t3 - t2
    if "first_call_s" in actual.notes:  # a JIT compile happened in this call: keep it apart
        row["compile_s"] = actual.notes["first_call_s"]
    if actual.notes:
        row["notes"] = json.dumps(actual.notes, default=str)
    judge(row, backend, inputs, expected, baseline, actual)
    if check_blind and row["verdict"] == Verdict.PASS.value:
        shifted = attention(inputs, mask_transform=shift_by_one_key).output
        visible_change = float((shifted - expected.output).abs().max()) if shifted.numel() else 0.0
        row["mask_shift_error"] = visible_change
        if visible_change <= row["limit"]:
            row["verdict"] = Verdict.BLIND.value
            row["message"] = (f"a one-key mask shift moves the output by {visible_change:.3g} <= limit "
                              f"{row['limit']:.3g}: this case cannot see mask bugs")
    row["compare_s"] = time.perf_counter() - t3
    return Evaluation(row, inputs, expected, actual)


def judge(row: dict[str, Any], backend: Backend, inputs: Inputs, expected: Expected, baseline: Expected,
          actual: Actual) -> None:
    """Fill the row's metrics and verdict. Order: shape, contracts, NaN, numeric max/mean, LSE."""
    case = inputs.case
    exp_out = expected.output
    if tuple(actual.output.shape) != tuple(exp_out.shape):
        row.update(verdict=Verdict.CONTRACT.value, contract="output shape",
                   message=f"output shape {tuple(actual.output.shape)}, expected {tuple(exp_out.shape)}")
        return
    out = actual.output.to(exp_out.device).double()
    empty = expected.num_visible == 0  # rows that see no key: output must be exactly 0
    rule = rule_for(case.dtype, case.kv_cache_dtype)
    lim = limits(rule, exp_out[~empty], baseline.output.double()[~empty], case.dtype.torch, expected.lse)
    nonempty = (out - exp_out).abs()[~empty]
    finite = torch.isfinite(nonempty)
    baseline_err = (baseline.output.double() - exp_out).abs()[~empty]
    row.update(
        limit=lim.max_limit, mean_limit=lim.mean_limit, floor=lim.floor,
        baseline_max_err=float(baseline_err.max()) if nonempty.numel() else 0.0,
        baseline_mean_err=float(baseline_err.mean()) if nonempty.numel() else 0.0,
        nan_count=int(out.isnan().sum()), inf_count=int(out.isinf().sum()),
    )
    _error_metrics(row, out, exp_out, empty, inputs)
    verdict, message, contract = Verdict.PASS, "", ""
    if actual.output_buffer is not None:
        spill = actual.output_buffer[actual.buffer_rows:]
        if spill.numel() and not spill.isnan().all():
            verdict, contract = Verdict.CONTRACT, "output buffer rows touched"
            message = f"{int((~spill.isnan()).sum())} elements past row {actual.buffer_rows} were written"
    if verdict == Verdict.PASS and empty.any():
        rows = out[empty]
        if not bool((rows == 0).all()):
            verdict, contract = Verdict.CONTRACT, "empty row not zero"
            message = f"{int(empty.sum())} (token, head) rows see no key; kernel gave " + (
                "NaN" if rows.isnan().any() else f"max |out| {float(rows.abs().max()):.3g}") + " instead of 0"
    if verdict == Verdict.PASS and not bool(finite.all()):
        verdict = Verdict.NAN
        message = f"{int((~finite).sum())} NaN/Inf elements where the oracle is finite"
    if verdict == Verdict.PASS and row["max_err"] > lim.max_limit:
        verdict = Verdict.MISMATCH
        message = f"max error {row['max_err']:.4g} > limit {lim.max_limit:.4g} (baseline {row['baseline_max_err']:.3g})"
    if verdict == Verdict.PASS and row["mean_err"] > lim.mean_limit:
        verdict = Verdict.MISMATCH
        message = f"mean error {row['mean_err']:.4g} > mean limit {lim.mean_limit:.4g}"
    if actual.lse is not None and backend.caps.lse_base is not None:
        lse_verdict, lse_message, lse_contract = _judge_lse(row, backend, expected, baseline, actual, empty, rule)
        if verdict == Verdict.PASS and lse_verdict != Verdict.PASS:
            verdict, message, contract = lse_verdict, lse_message, lse_contract
    row.update(verdict=verdict.value, message=message, contract=contract)


def _error_metrics(row, out: Tensor, exp: Tensor, empty: Tensor, inputs: Inputs) -> None:
    diff = (out - exp).abs()
    d = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    d = d.masked_fill(empty[..., None].expand_as(d), 0.0) if empty.any() else d
    if d.numel() == 0:
        row.update(max_err=0.0, mean_err=0.0, max_rel_err=0.0, rmse=0.0, cosine=1.0)
        return
    flat = int(torch.argmax(torch.nan_to_num(d, posinf=1e300)))
    token, head, dim = (flat // (d.shape[1] * d.shape[2]), (flat // d.shape[2]) % d.shape[1], flat % d.shape[2])
    starts = inputs.query_start_loc.tolist()
    seq = max(i for i in range(len(starts) - 1) if starts[i] <= token) if len(starts) > 1 else 0
    fin = torch.isfinite(out) & torch.isfinite(exp)
    a, e = out[fin], exp[fin]
    cos = float(torch.nn.functional.cosine_similarity(a.flatten(), e.flatten(), dim=0)) if a.numel() and e.norm() > 0 else 1.0
    row.update(
        max_err=float(d.max()), mean_err=float(d[torch.isfinite(d)].mean()) if torch.isfinite(d).any() else math.inf,
        max_rel_err=float((d / (exp.abs() + 1e-6))[torch.isfinite(d)].max()) if torch.isfinite(d).any() else math.inf,
        rmse=float(((a - e) ** 2).mean().sqrt()) if a.numel() else 0.0, cosine=cos,
        worst_seq=seq, worst_token=token - starts[seq], worst_token_flat=token, worst_head=head, worst_dim=dim,
        worst_expected=float(exp[token, head, dim]), worst_actual=float(out[token, head, dim]),
    )
    row["error_ratio"] = row["max_err"] / row["limit"] if row["limit"] > 0 else math.inf


def inputs_have_no_sinks(expected: Expected, empty: Tensor) -> bool:
    """Empty rows have LSE -inf unless a sink lends them its logit."""
    return bool(torch.isneginf(expected.lse[empty]).all())


def _judge_lse(row, backend, expected, baseline, actual, empty, rule):
    lse = actual.lse.to(expected.lse.device).double()
    if tuple(lse.shape) != tuple(expected.lse.shape):
        return Verdict.CONTRACT, f"LSE shape {tuple(lse.shape)}, expected {tuple(expected.lse.shape)}", "lse shape"
    declared_empty = backend.caps.empty_row_lse
    if empty.any() and inputs_have_no_sinks(expected, empty):
        got = lse[empty]
        ok = got == declared_empty  # exact, infinities included
        if not bool(ok.all()):
            return (Verdict.CONTRACT, f"LSE of rows with no key is {float(got[~ok][0]):.4g}, declared "
                    f"{declared_empty}", "empty-row LSE")
    rows = ~empty | ~torch.isneginf(expected.lse)
    e, b, a = expected.lse[rows], baseline.lse.double()[rows], lse[rows]
    if e.numel() == 0:
        return Verdict.PASS, "", ""
    if not bool(torch.isfinite(a).all()):
        return Verdict.NAN, "NaN/Inf in LSE where the oracle is finite", ""
    err = (a - e).abs()
    limit = rule.lse_factor * float((b - e).abs().max()) + rule.lse_floor * max(1.0, float(e.abs().max()))
    row.update(lse_max_err=float(err.max()), lse_limit=limit)
    if float(err.max()) > limit:
        ratio = float((a / e)[e.abs() > 0.5].median()) if bool((e.abs() > 0.5).any()) else float("nan")
        hint = " (ratio ~1.4427: base-2 LSE declared as natural)" if abs(ratio - 1.4427) < 0.01 else ""
        return Verdict.MISMATCH, f"LSE max error {float(err.max()):.4g} > limit {limit:.4g}{hint}", "lse"
    return Verdict.PASS, "", ""
