"""The verdict on one comparison: every symptom judged and recorded, the most severe one named.

Symptoms are checked independently, so none hides another: a kernel whose empty rows break their
contract *and* whose rows with keys are far off is reported with both, and its verdict is the
mismatch (severity: nan > mismatch > contract). Each symptom has a kind (what is wrong, used to
bucket failures) and a message (by how much).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import Tensor

from reference.attention import Expected
from reference.case import KVCacheDType
from reference.inputs import Inputs

from .tolerance import ToleranceRule, limits, rule_for


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
    error_metrics(row, out, exp_out, empty, inputs)
    symptoms: list[Symptom] = []
    if actual.output_buffer is not None:
        spill = actual.output_buffer[actual.buffer_rows:]
        if spill.numel() and not spill.isnan().all():
            symptoms.append(Symptom(Verdict.CONTRACT, "buffer", f"{int((~spill.isnan()).sum())} elements past row "
                                                                f"{actual.buffer_rows} of the output buffer were written"))
    if empty.any():
        rows = out[empty]
        if not bool((rows == 0).all()):
            got = "NaN" if rows.isnan().any() else f"max |out| {float(rows.abs().max()):.3g}"
            symptoms.append(Symptom(Verdict.CONTRACT, "empty-row-output",
                                    f"{int(empty.sum())} (token, head) rows see no key; kernel gave {got} instead of 0"))
    if not bool(finite.all()):
        symptoms.append(Symptom(Verdict.NAN, "output-nan",
                                f"{int((~finite).sum())} NaN/Inf elements where the oracle is finite"))
    finite_max = float(nonempty[finite].max()) if bool(finite.any()) else 0.0
    if finite_max > lim.max_limit:
        symptoms.append(Symptom(Verdict.MISMATCH, "output", f"max error {finite_max:.4g} > limit {lim.max_limit:.4g} "
                                                            f"(baseline {row['baseline_max_err']:.3g})"))
    finite_mean = float(nonempty[finite].mean()) if bool(finite.any()) else 0.0
    if finite_mean > lim.mean_limit:
        symptoms.append(Symptom(Verdict.MISMATCH, "output-mean",
                                f"mean error {finite_mean:.4g} > mean limit {lim.mean_limit:.4g}"))
    if actual.written_cache is not None and inputs.cache is not None:
        symptoms += judge_cache_write(inputs.cache, actual.written_cache)
    if actual.lse is not None and caps.lse_base is not None:
        symptoms += judge_lse(row, caps.empty_row_lse, expected, baseline, actual.lse, empty, rule)
    record(row, symptoms)


def error_metrics(row: dict[str, Any], out: Tensor, exp: Tensor, empty: Tensor, inputs: Inputs) -> None:
    """max / mean / relative error, RMSE, cosine and the worst element (sequence, token, head, dim)."""
    diff = (out - exp).abs()
    d = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    d = d.masked_fill(empty[..., None].expand_as(d), 0.0) if empty.any() else d
    if d.numel() == 0:
        row.update(max_err=0.0, mean_err=0.0, max_rel_err=0.0, rmse=0.0, cosine=1.0, error_ratio=0.0)
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


def judge_lse(row: dict[str, Any], declared_empty: float, expected: Expected, baseline: Expected, actual_lse: Tensor,
              empty: Tensor, rule: ToleranceRule) -> list[Symptom]:
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
    finite = torch.isfinite(a)
    if not bool(finite.all()):
        out.append(Symptom(Verdict.NAN, "lse-nan", f"{int((~finite).sum())} NaN/Inf LSE values where the oracle is finite"))
    err = (a - e).abs()[finite]
    limit = rule.lse_factor * float((b - e).abs().max()) + rule.lse_floor * max(1.0, float(e.abs().max()))
    worst = float(err.max()) if err.numel() else 0.0
    row.update(lse_max_err=worst, lse_limit=limit)
    if worst > limit:
        sel = (e.abs() > 0.5) & finite
        ratio = float((a[sel] / e[sel]).median()) if bool(sel.any()) else float("nan")
        hint = " (ratio ~1.4427: base-2 LSE declared as natural)" if abs(ratio - 1.4427) < 0.01 else ""
        out.append(Symptom(Verdict.MISMATCH, "lse", f"LSE max error {worst:.4g} > limit {limit:.4g}{hint}"))
    return out


def judge_cache_write(expected_cache, written) -> list[Symptom]:
    """The kernel's cache writer against the oracle's `write_kv`: every byte of the pool (canaries in
    untouched slots included) and the scale caches must be equal (per-token-head caches: see
    `judge_int4_write` and `judge_token_head_write`)."""
    if expected_cache.kv_cache_dtype == KVCacheDType.INT4_PER_TOKEN_HEAD:
        return judge_int4_write(expected_cache, written)
    if expected_cache.kv_cache_dtype in TOKEN_HEAD_STEP:
        return judge_token_head_write(expected_cache, written)
    out = []
    pairs = list(zip(expected_cache.paged.tensors, written.paged.tensors))
    written_scales = written.scale_caches
    pairs += [(want, written_scales[name]) for name, want in expected_cache.scale_caches.items() if name in written_scales]
    differ, first = 0, None
    for want, got in pairs:
        w = want.detach().cpu().contiguous().view(torch.uint8)
        g = got.detach().cpu().contiguous().view(torch.uint8)
        if w.shape != g.shape:
            return [Symptom(Verdict.CONTRACT, "cache-write", f"written cache shape {tuple(got.shape)}, expected {tuple(want.shape)}")]
        bad = w != g
        if bool(bad.any()):
            differ += int(bad.sum())
            if first is None:
                first = tuple(int(x) for x in bad.nonzero()[0])
    if differ:
        out.append(Symptom(Verdict.CONTRACT, "cache-write",
                           f"the written cache differs from the oracle's in {differ} bytes (first at index {first})"))
    return out


TIE_QUANTA = 1.5  # a code flip (1) or a zero point flip pushing the extreme code into the clamp (1.5)


def judge_int4_write(expected_cache, written) -> list[Symptom]:
    """int4 writers rotate in finite precision (vLLM's in fp32, or bf16 through its Hadamard kernel), so a
    code may flip where the exact rotation sits on a rounding tie, and a zero point on a tie moves the
    extreme element's code into the clamp: each dequantized element in the rotated domain,
    (n - zero point) * scale, must be within 1.5 quanta of the oracle's; untouched slots (NaN or finite
    canary scales) must stay untouched. A wrong sign vector, nibble order, zero point or scale moves
    elements by many quanta."""
    from reference import int4

    def quanta_off(want_codes, got_codes, want_stored, got_stored):
        w, g = int4.dequantize(want_codes, want_stored), int4.dequantize(got_codes, got_stored)
        quantum = torch.maximum(int4.split_scale(want_stored)[0], int4.split_scale(got_stored)[0]).double()
        quanta = (w - g).abs() / quantum[..., None]
        touched = ~torch.isnan(w) | ~torch.isnan(g)
        return touched & ~(quanta <= TIE_QUANTA), quanta  # NaN on one side only is bad too

    return _judge_elements(expected_cache, written, quanta_off,
                           lambda n, first, worst: f"the written int4 cache decodes more than {TIE_QUANTA} quanta from "
                                                   f"the oracle's at {n} elements (first at {first}, worst {worst:.3g} quanta)")


def _judge_elements(expected_cache, written, compare, describe) -> list[Symptom]:
    """A per-token-head cache write judged element by element: `compare(want codes, got codes, want scales, got
    scales) -> (bad mask, distance)` over the keys and the values with their scale caches; one cache-write
    symptom worded by `describe(bad elements, first bad index, worst distance)`."""
    bad_total, first, worst = 0, None, 0.0
    pairs = ((expected_cache.paged.key_view(), written.paged.key_view(), "k_token_scales"),
             (expected_cache.paged.value_view(), written.paged.value_view(), "v_token_scales"))
    for want_codes, got_codes, name in pairs:
        want_scales = getattr(expected_cache, name).detach().cpu()
        got_scales = written.scale_caches[name].detach().cpu()
        if want_codes.shape != got_codes.shape or want_scales.shape != got_scales.shape:
            return [Symptom(Verdict.CONTRACT, "cache-write", f"written cache shape {tuple(got_codes.shape)}, "
                                                             f"expected {tuple(want_codes.shape)}")]
        bad, distance = compare(want_codes.detach().cpu(), got_codes.detach().cpu(), want_scales, got_scales)
        if bool(bad.any()):
            bad_total += int(bad.sum())
            worst = max(worst, float(distance[bad].nan_to_num(float("inf")).max()))
            first = first or tuple(int(x) for x in bad.nonzero()[0])
    return [Symptom(Verdict.CONTRACT, "cache-write", describe(bad_total, first, worst))] if bad_total else []


# One code step of a per-token-head format at code c (in code units): int8 1; fp8 e4m3 2^(floor(log2|c|) - 3),
# its subnormal step 2^-9 at the bottom.
TOKEN_HEAD_STEP = {
    KVCacheDType.INT8_PER_TOKEN_HEAD: lambda c: torch.ones_like(c),
    KVCacheDType.FP8_PER_TOKEN_HEAD: lambda c: torch.ldexp(torch.ones_like(c), torch.frexp(c)[1] - 4).clamp(min=2.0 ** -9),
}
SCALE_RTOL = 2.0 ** -20  # a float32 scale computed another way (a reciprocal, fused multiply): a few ulps
# Codes one step off are ties flipped by those ulps: 4e-7 of int8 codes in a CPU model of vLLM's rule (amax / QMAX,
# then x * (1 / scale)). Far more is a rounding rule (truncation, round toward zero), which moves half of them.
TIE_SHARE = 0.01


def judge_token_head_write(expected_cache, written) -> list[Symptom]:
    """fp8 / int8 per-token-head writers compute scale = amax / QMAX in float32 their own way (vLLM's is a few
    ulps off the correctly rounded quotient: session 6; 3,886 of 4,317 fp8 writes failed a byte-for-byte check
    in session 12), so a code may flip where x / scale sits on a rounding tie. Where bytes differ, each scale
    must be within SCALE_RTOL of the oracle's and each dequantized element, code * scale, within one code step,
    with at most TIE_SHARE of the written codes off at all; slots the oracle left untouched (canaries, NaN
    scales) must stay byte-identical. A wrong scale rule or slot moves elements by many steps, a wrong rounding
    rule moves many by one."""
    step_of = TOKEN_HEAD_STEP[expected_cache.kv_cache_dtype]

    def steps_off(want_codes, got_codes, want_scale, got_scale):
        # [..., D] per scale (the V0 key view splits D in two)
        want_codes, got_codes = (c.reshape(*want_scale.shape, -1) for c in (want_codes, got_codes))
        want_scale, got_scale = want_scale.double(), got_scale.double()
        wc, gc = want_codes.double(), got_codes.double()
        steps = torch.maximum(step_of(wc), step_of(gc)) * torch.maximum(want_scale, got_scale)[..., None]
        off = (wc * want_scale[..., None] - gc * got_scale[..., None]).abs() / steps
        scale_ok = (want_scale - got_scale).abs() <= SCALE_RTOL * want_scale.abs()
        same = want_codes.view(torch.uint8) == got_codes.view(torch.uint8)
        same &= (want_scale == got_scale)[..., None] | (want_scale.isnan() & got_scale.isnan())[..., None]
        bad = ~same & ~((off <= 1.0 + 1e-9) & scale_ok[..., None])  # NaN in a changed element is bad
        moved = ~same & (off > 0.5)  # a code one step off (the rest: scales a few ulps apart)
        if int(moved.sum()) > max(2, TIE_SHARE * int((~want_scale.isnan()).sum()) * want_codes.shape[-1]):
            bad |= moved
        return bad, off

    return _judge_elements(expected_cache, written, steps_off,
                           lambda n, first, worst: f"the written cache decodes more than one code step (a scale more "
                                                   f"than {SCALE_RTOL:.2g} relative, or over {TIE_SHARE:.0%} of the "
                                                   f"codes one step) from the oracle's at {n} elements (first at "
                                                   f"{first}, worst {worst:.3g} steps)")
