"""The judge's common path on the oracle's device, read back in one copy.

A case whose oracle runs on the GPU holds millions of output elements at the larger size tiers. Judged on the host,
its float64 outputs cross back and the judge's reductions run on one CPU thread (66 ms for 2M elements, 625 ms for
8M, on the 2-core box); judged on the GPU as `fuzz.judge.judge` is written, each of its dozens of reductions is a
synchronisation of a GPU that a campaign's 16 workers share. Here, in the common case (every element finite, every
row sees a key, output and LSE shaped as expected), every number the judge reads is one
reduction on the device, stacked and read in one copy with whatever else the caller reads (the blind check's two
answers), and the row gets the fields and symptoms `judge` gives (tests/fuzz/test_summary.py holds the two alike).
Anything else returns None, the row untouched: the caller judges on the host.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from backends.base import Actual
from reference.attention import Expected
from reference.inputs import Inputs
from reference.widening import widen

from .cache_write import judge_writes
from .judge import buffer_symptom, cosine_from, error_symptoms, lse_limit, lse_mismatch, record, worst_place
from .tolerance import limits_from, logit_floor, rounding_error, rule_for, soft_cap_floor, soft_cap_shift

# What one case's vector holds, in order (the LSE's four only where the kernel's LSE is judged)
FIELDS = ("min_visible", "actual_norm", "expected_norm", "base_max", "base_mean", "rounding", "expected_max", "lse_max",
          "spread", "max_err", "argmax", "mean_err", "error_norm", "dot", "worst_actual", "worst_expected", "max_rel_err",
          "spilled")
LSE_FIELDS = ("lse_err", "lse_base_err", "lse_expected_max")


def judge_on_device(row: dict[str, Any], caps, inputs: Inputs, expected: Expected, baseline: Expected, actual: Actual,
                    extra: tuple[Tensor, ...] = ()) -> list[float] | None:
    """Fill `row` as fuzz.judge.judge would and return the values of the `extra` 0-dim tensors; None, the row untouched,
    where the case is not the common one."""
    e = expected.output
    if tuple(actual.output.shape) != tuple(e.shape) or not e.numel() or expected.num_visible is None:
        return None
    with_lse = actual.lse is not None and caps.lse_base is not None
    if with_lse and tuple(actual.lse.shape) != tuple(expected.lse.shape):
        return None
    # on the host a read is free: a case with an empty row declines before the reductions rather than after them
    if e.device.type == "cpu" and bool((expected.num_visible == 0).any()):
        return None
    case = inputs.case
    # Each pass over an output-sized float64 tensor costs as much as a case's op overhead once its heads and head size are
    # large (tens of us for 276k elements on one CPU thread), so the passes are few: the differences made in place, the
    # worst element and its place in one max, the square mean from the norm, and finiteness read off those reductions
    # (a NaN or infinity in the output, the oracle, the baseline or an LSE carries into the norm, amax or difference that
    # reads it; an overflowing norm only sends the case to the host judge).
    out = widen(actual.output.detach().to(e.device))
    diff = out.sub(e).abs_()
    max_err, argmax = diff.flatten().max(0)
    base_out = widen(baseline.output)
    base = base_out.sub(e).abs_()
    e_abs = e.abs()
    zero = e.new_zeros(())
    values = [expected.num_visible.min(), out.norm(), e.norm(), base.amax(), base.mean(), rounding_error(e, case.dtype.torch),
              e_abs.amax(), expected.lse.abs().amax(), zero if expected.logit_spread is None else expected.logit_spread,
              max_err, argmax, diff.mean(), torch.linalg.vector_norm(diff), out.flatten() @ e.flatten(),
              torch.take(out, argmax), torch.take(e, argmax)]  # (one operation each, where a tensor index reads back)
    values.append(diff.div_(e_abs.add_(1e-6)).amax())  # last: it takes diff and e_abs over
    spill = None if actual.output_buffer is None else actual.output_buffer[actual.buffer_rows:]
    values.append(zero if spill is None else (~spill.isnan()).sum())
    if with_lse:
        a, el = widen(actual.lse.detach().to(e.device)), expected.lse
        values += [(a - el).abs().amax(), (widen(baseline.lse) - el).abs().amax(), el.abs().amax()]
    read = torch.stack([v if v.dtype == torch.float64 else v.to(torch.float64) for v in values + list(extra)]).cpu().tolist()
    v = dict(zip(FIELDS + (LSE_FIELDS if with_lse else ()), read))
    finite = (v["actual_norm"], v["expected_norm"], v["base_max"], v["lse_max"]) + ((v["lse_err"],) if with_lse else ())
    if v["min_visible"] <= 0 or not all(math.isfinite(x) for x in finite):
        return None
    rule = rule_for(case.dtype, case.kv_cache_dtype)
    shift = soft_cap_shift(case, caps.soft_cap_tanh_error, v["lse_max"])
    lim = limits_from(rule, v["base_max"], v["base_mean"], 2.0 * v["rounding"],
                      logit_floor(v["expected_max"], v["lse_max"], v["spread"]) + soft_cap_floor(shift, v["expected_max"]))
    token, head, dim, seq = worst_place(int(v["argmax"]), tuple(e.shape), case.query_starts)
    row.update(limit=lim.max_limit, mean_limit=lim.mean_limit, floor=lim.floor, logit_spread=v["spread"],
               baseline_max_err=v["base_max"], baseline_mean_err=v["base_mean"], nan_count=0, inf_count=0,
               max_err=v["max_err"], mean_err=v["mean_err"], max_rel_err=v["max_rel_err"],
               rmse=v["error_norm"] / math.sqrt(e.numel()),
               cosine=cosine_from(v["dot"], v["actual_norm"], v["expected_norm"]),
               worst_seq=seq, worst_token=token - case.query_starts[seq], worst_token_flat=token, worst_head=head,
               worst_dim=dim, worst_expected=v["worst_expected"], worst_actual=v["worst_actual"])
    row["error_ratio"] = row["max_err"] / row["limit"] if row["limit"] > 0 else math.inf
    symptoms = [buffer_symptom(int(v["spilled"]), actual.buffer_rows)] if v["spilled"] else []
    symptoms += error_symptoms(v["max_err"], v["mean_err"], lim, v["base_max"])
    symptoms += judge_writes(inputs, actual)
    if with_lse:
        limit = lse_limit(rule, v["lse_base_err"], v["lse_expected_max"], shift)
        row.update(lse_max_err=v["lse_err"], lse_limit=limit)
        if v["lse_err"] > limit:
            symptoms.append(lse_mismatch(v["lse_err"], limit, a, el, None))
    record(row, symptoms)
    return read[len(values):]
