"""The verdict on one comparison: every symptom judged and recorded, the most severe one named.

Symptoms are checked independently, so none hides another: a kernel whose empty rows break their
contract *and* whose rows with keys are far off is reported with both, and its verdict is the
mismatch (severity: nan > mismatch > contract). Each symptom has a kind (what is wrong, used to
bucket failures) and a message (by how much).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from reference.attention import Expected
from reference.inputs import Inputs
from reference.softmax import all_finite
from reference.widening import widen

from .cache_write import judge_writes
from .tolerance import Limits, ToleranceRule, finite_abs_max, limits, rule_for, soft_cap_shift
from .verdicts import SEVERITY, Symptom, Verdict  # noqa: F401 (Verdict and Symptom are imported from here too)


def record(row: dict[str, Any], symptoms: list[Symptom]) -> None:
    """Write the verdict (most severe symptom), its kind and message, and every symptom, onto the row."""
    if not symptoms:
        row.update(verdict=Verdict.PASS.value, message="", contract="", symptom="", symptoms=[])
        return
    main = min(symptoms, key=lambda s: SEVERITY.index(s.verdict))
    contracts = [s.kind for s in symptoms if s.verdict == Verdict.CONTRACT]
    row.update(verdict=main.verdict.value, symptom=main.kind, message=main.message,
               contract=contracts[0] if contracts else "", symptoms=[s.to_dict() for s in symptoms])
    if len(symptoms) > 1:
        row["message"] = main.message + " (also: " + "; ".join(s.message for s in symptoms if s is not main) + ")"


def judge(row: dict[str, Any], caps, inputs: Inputs, expected: Expected, baseline: Expected, actual) -> None:
    """Fill the row's metrics and verdict from every symptom of `actual` against the oracle."""
    case = inputs.case
    exp_out = expected.output
    if tuple(actual.output.shape) != tuple(exp_out.shape):
        record(row, [Symptom(Verdict.CONTRACT, "output-shape",
                             f"output shape {tuple(actual.output.shape)}, expected {tuple(exp_out.shape)}")])
        return
    out = widen(actual.output.to(exp_out.device))
    empty = expected.num_visible == 0  # rows that see no key: output must be exactly 0
    rule = rule_for(case.dtype, case.kv_cache_dtype)
    # One difference tensor for every metric; rows with keys selected once (a view when every row has keys)
    seen_rows = (lambda t: t[~empty]) if bool(empty.any()) else (lambda t: t.flatten(0, 1))
    diff = (out - exp_out).abs()
    exp_seen, base_seen = seen_rows(exp_out), seen_rows(widen(baseline.output))
    spread = 0.0 if expected.logit_spread is None else float(expected.logit_spread)
    shift = 0.0
    if case.soft_cap is not None and caps.soft_cap_tanh_error:
        shift = soft_cap_shift(case, caps.soft_cap_tanh_error, finite_abs_max(expected.lse))
    lim = limits(rule, exp_seen, base_seen, case.dtype.torch, expected.lse, spread, shift)
    nonempty = seen_rows(diff)
    seen_finite = all_finite(nonempty)
    finite = None if seen_finite else torch.isfinite(nonempty)
    out_finite = seen_finite and all_finite(out)
    if all_finite(base_seen) and all_finite(exp_seen):  # limits() measured the same differences
        baseline_max, baseline_mean = lim.baseline_max, lim.baseline_mean
    else:
        baseline_err = (base_seen - exp_seen).abs()
        baseline_max = float(baseline_err.max()) if nonempty.numel() else 0.0
        baseline_mean = float(baseline_err.mean()) if nonempty.numel() else 0.0
    row.update(
        limit=lim.max_limit, mean_limit=lim.mean_limit, floor=lim.floor, logit_spread=spread,
        baseline_max_err=baseline_max if nonempty.numel() else 0.0,
        baseline_mean_err=baseline_mean if nonempty.numel() else 0.0,
        nan_count=0 if out_finite else int(out.isnan().sum()), inf_count=0 if out_finite else int(out.isinf().sum()),
    )
    error_metrics(row, out, exp_out, empty, inputs, diff)
    symptoms: list[Symptom] = []
    if actual.output_buffer is not None:
        spill = actual.output_buffer[actual.buffer_rows:]
        if spill.numel() and not spill.isnan().all():
            symptoms.append(buffer_symptom(int((~spill.isnan()).sum()), actual.buffer_rows))
    if empty.any():
        rows = out[empty]
        if not bool((rows == 0).all()):
            got = "NaN" if rows.isnan().any() else f"max |out| {float(rows.abs().max()):.3g}"
            symptoms.append(Symptom(Verdict.CONTRACT, "empty-row-output",
                                    f"{int(empty.sum())} (token, head) rows see no key; kernel gave {got} instead of 0"))
    if not seen_finite:
        symptoms.append(Symptom(Verdict.NAN, "output-nan",
                                f"{int((~finite).sum())} NaN/Inf elements where the oracle is finite"))
    errors = nonempty if seen_finite else nonempty[finite]
    finite_max = float(errors.max()) if errors.numel() else 0.0
    finite_mean = float(errors.mean()) if errors.numel() else 0.0
    symptoms += error_symptoms(finite_max, finite_mean, lim, row["baseline_max_err"])
    symptoms += judge_writes(inputs, actual)
    if actual.lse is not None and caps.lse_base is not None:
        symptoms += judge_lse(row, caps.empty_row_lse, expected, baseline, actual.lse, empty, rule, shift)
    record(row, symptoms)


def buffer_symptom(written: int, rows: int) -> Symptom:
    """A kernel wrote past the rows of the caller's output buffer (its spare rows hold NaN until then)."""
    return Symptom(Verdict.CONTRACT, "buffer", f"{written} elements past row {rows} of the output buffer were written")


def error_symptoms(max_err: float, mean_err: float, lim: Limits, baseline_max: float) -> list[Symptom]:
    """Mismatches of the finite errors of rows with keys against the max and mean limits."""
    out = []
    if max_err > lim.max_limit:
        out.append(Symptom(Verdict.MISMATCH, "output", f"max error {max_err:.4g} > limit {lim.max_limit:.4g} "
                                                       f"(baseline {baseline_max:.3g})"))
    if mean_err > lim.mean_limit:
        out.append(Symptom(Verdict.MISMATCH, "output-mean", f"mean error {mean_err:.4g} > mean limit {lim.mean_limit:.4g}"))
    return out


def error_metrics(row: dict[str, Any], out: Tensor, exp: Tensor, empty: Tensor, inputs: Inputs,
                  diff: Tensor | None = None) -> None:
    """max / mean / relative error, RMSE, cosine and the worst element (sequence, token, head, dim).
    `diff`: |out - exp| when the caller has it. Rows with no key count as error 0; a non-finite error as inf."""
    diff = (out - exp).abs() if diff is None else diff
    finite_out = all_finite(out) and all_finite(exp)
    d = diff if finite_out else torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    d = d.masked_fill(empty[..., None].expand_as(d), 0.0) if empty.any() else d
    if d.numel() == 0:
        row.update(max_err=0.0, mean_err=0.0, max_rel_err=0.0, rmse=0.0, cosine=1.0, error_ratio=0.0)
        return
    flat = int(torch.argmax(d if finite_out else torch.nan_to_num(d, posinf=1e300)))
    starts = inputs.case.query_starts
    token, head, dim, seq = worst_place(flat, tuple(d.shape), starts)
    if finite_out:  # (a - e)^2 is |a - e|^2 to the bit: the difference the caller measured
        a, e, fd, square = out.flatten(), exp.flatten(), d, diff * diff
    else:
        fin = torch.isfinite(out) & torch.isfinite(exp)
        a, e, fd = out[fin], exp[fin], d[torch.isfinite(d)]
        square = (a - e) ** 2
    any_finite = fd.numel() > 0
    rel = d / (exp.abs() + 1e-6)
    row.update(
        max_err=float(d.max()), mean_err=float(fd.mean()) if any_finite else math.inf,
        max_rel_err=float(rel.max() if finite_out else rel[torch.isfinite(d)].max()) if any_finite else math.inf,
        rmse=float(square.mean().sqrt()) if a.numel() else 0.0, cosine=cosine(a, e),
        worst_seq=seq, worst_token=token - starts[seq], worst_token_flat=token, worst_head=head, worst_dim=dim,
        worst_expected=float(exp[token, head, dim]), worst_actual=float(out[token, head, dim]),
    )
    row["error_ratio"] = row["max_err"] / row["limit"] if row["limit"] > 0 else math.inf


def worst_place(flat: int, shape: tuple[int, int, int], starts: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(token, head, dim, sequence) of element `flat` of an output [tokens, heads, dim]."""
    token, head, dim = flat // (shape[1] * shape[2]), (flat // shape[2]) % shape[1], flat % shape[2]
    seq = max(i for i in range(len(starts) - 1) if starts[i] <= token) if len(starts) > 1 else 0
    return token, head, dim, seq


def cosine(a: Tensor, e: Tensor) -> float:
    """Cosine similarity of two flat float64 tensors (1 when either is empty or the expected one is 0): one dot
    product and two norms (torch's cosine_similarity normalizes each side first: 130 us a call on small cases)."""
    if not a.numel():
        return 1.0
    e_norm = float(e.norm())
    return cosine_from(float(a @ e), float(a.norm()), e_norm) if e_norm else 1.0


def cosine_from(dot: float, a_norm: float, e_norm: float) -> float:
    """cosine() from the dot product and the norms (1 when the expected side is 0)."""
    return dot / max(a_norm * e_norm, 1e-8) if e_norm else 1.0


def lse_limit(rule: ToleranceRule, baseline_max: float, expected_max: float, shift: float = 0.0) -> float:
    """The LSE's limit: lse_factor x the baseline's max error + lse_floor x max(1, max|expected LSE|), + an approximate
    soft-cap's shift of the logits (fuzz.tolerance.soft_cap_shift)."""
    return rule.lse_factor * baseline_max + rule.lse_floor * max(1.0, expected_max) + shift


def inputs_have_no_sinks(expected: Expected, empty: Tensor) -> bool:
    """Empty rows have LSE -inf unless a sink lends them its logit."""
    return bool(torch.isneginf(expected.lse[empty]).all())


def judge_lse(row: dict[str, Any], declared_empty: float, expected: Expected, baseline: Expected, actual_lse: Tensor,
              empty: Tensor, rule: ToleranceRule, shift: float = 0.0) -> list[Symptom]:
    """LSE symptoms: shape, the declared empty-row value, non-finite values, error past the limit."""
    lse = actual_lse.to(expected.lse.device).double()
    if tuple(lse.shape) != tuple(expected.lse.shape):
        return [Symptom(Verdict.CONTRACT, "lse-shape", f"LSE shape {tuple(lse.shape)}, expected {tuple(expected.lse.shape)}")]
    out: list[Symptom] = []
    if empty.any() and inputs_have_no_sinks(expected, empty):
        got = lse[empty]
        ok = got == declared_empty  # exact, infinities included
        if not bool(ok.all()):
            out.append(Symptom(Verdict.CONTRACT, "empty-row-lse",
                               f"LSE of rows with no key is {float(got[~ok][0]):.4g}, declared {declared_empty}"))
    rows = ~empty | ~torch.isneginf(expected.lse)
    e, b, a = expected.lse[rows], baseline.lse.double()[rows], lse[rows]
    if e.numel() == 0:
        return out
    every = all_finite(a)
    finite = None if every else torch.isfinite(a)
    if not every:
        out.append(Symptom(Verdict.NAN, "lse-nan", f"{int((~finite).sum())} NaN/Inf LSE values where the oracle is finite"))
    err = (a - e).abs() if every else (a - e).abs()[finite]
    limit = lse_limit(rule, float((b - e).abs().max()), float(e.abs().max()), shift)
    worst = float(err.max()) if err.numel() else 0.0
    row.update(lse_max_err=worst, lse_limit=limit)
    if worst > limit:
        out.append(lse_mismatch(worst, limit, a, e, finite))
    return out


def lse_mismatch(worst: float, limit: float, a: Tensor, e: Tensor, finite: Tensor | None) -> Symptom:
    """The LSE mismatch, naming a base-2 LSE where the median ratio of actual to expected LSE says so."""
    sel = (e.abs() > 0.5) if finite is None else (e.abs() > 0.5) & finite
    ratio = float((a[sel] / e[sel]).median()) if bool(sel.any()) else float("nan")
    hint = " (ratio ~1.4427: base-2 LSE declared as natural)" if abs(ratio - 1.4427) < 0.01 else ""
    return Symptom(Verdict.MISMATCH, "lse", f"LSE max error {worst:.4g} > limit {limit:.4g}{hint}")
