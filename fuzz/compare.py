"""Evaluate one Case on one backend: materialize, oracle, baseline, kernel, judge -> a Row.

A Row is a flat dict (one JSON line in rows.jsonl, one DataFrame row in reports/): the verdict and
every symptom (fuzz.judge), every error metric the design names, the worst element, the timings
and the Case itself.

Where the oracle runs: inputs are always drawn on the CPU (bit-identical anywhere). The float64
oracle, its baseline and the blind check are hundreds of small launches per example; on a GPU
shared by many worker processes those launches serialise, so for cases up to `oracle_cpu_max`
score elements (heads x queries x keys) the oracle runs on the CPU and only the kernel runs on the
kernel's device (measured in benchmarks/results/). Larger cases run the oracle beside the kernel. Either way a case is
judged in one read: the kernel's outputs come to the oracle's device in one copy inside the kernel's own try (so a
device error there is the case's crash), and every number the judge reads comes back in one copy with the blind
check's answer (`fuzz.summary`; the host judge after one copy, `on_host`, where the case is not the common one).
Nothing waits for the inputs' copy to the GPU but the kernel's call, so the copy overlaps a host oracle.
"""
from __future__ import annotations

import json
import re
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from backends.base import Actual, Backend, Unsupported
from reference.attention import Expected, attention
from reference import transfer
from reference.case import Case
from reference.inputs import Inputs, materialize, to_device
from reference.one_key import key_changes
from reference.packed import PackedLayout, PackedScores, pack_scores, packable, packed_baseline
from reference.softmax import ProbabilityRounding

from .blind import shift_by_one_key
from .cache_write import scales_computed
from .judge import Verdict, judge
from .summary import judge_on_device
from .tolerance import baseline_dtype, probability_rounding

__all__ = ["Evaluation", "Verdict", "base_row", "evaluate", "score_elements", "ORACLE_CPU_MAX"]

# Score elements up to which the oracle runs on the CPU when the kernel runs on a GPU: the measured
# break-even of one CPU thread against a GPU shared by 16 workers (H100: 32k elements 48 vs 65 ms,
# 262k elements 362 vs 112 ms; benchmarks/results/oracle/device-crossover-h100-2026-11-23.md).
ORACLE_CPU_MAX = 1 << 16


@dataclass
class Evaluation:
    row: dict[str, Any]
    inputs: Inputs | None = None
    expected: Expected | None = None
    actual: Actual | None = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _copied(device: torch.device) -> torch.cuda.Event | None:
    """An event after the work queued so far on `device` (the inputs' copy from the host), or None off a GPU."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def score_elements(case: Case) -> int:
    """Size of the oracle's work: heads x queries x keys summed over sequences."""
    return case.num_heads * sum(q * k for q, k in zip(case.query_lens, case.kv_lens))


def size_tier(case: Case) -> str:
    """small (<= 64 keys), tile (65..512: crosses 64/128/256-key tiles), long (> 512: split-KV territory)."""
    keys = case.max_kv_len
    return "small" if keys <= 64 else "tile" if keys <= 512 else "long"


def base_row(backend: Backend, case: Case) -> dict[str, Any]:
    return {
        "backend": backend.name, "library": backend.library, "case": case.to_json(),
        "features": ",".join(sorted(case.features())), "dtype": case.dtype.value,
        "kv_cache_dtype": case.kv_cache_dtype.value, "attn_type": case.attn_type.value,
        "layout": case.cache.layout.value if case.cache else "contiguous",
        "block_size": case.cache.block_size if case.cache else 0,
        "num_sequences": len(case.sequences), "num_tokens": case.num_tokens, "max_kv_len": case.max_kv_len,
        "max_query_len": case.max_query_len, "size_tier": size_tier(case),
        "num_heads": case.num_heads, "num_kv_heads": case.num_kv_heads, "head_size": case.head_size,
        "value_class": case.values.distribution.value, "logit_scale": case.values.logit_scale,
        "encodings": ",".join(f"{name}={value}" for name, value in case.encodings),
        "seed": case.seed,
    }


_ERROR_LINE = re.compile(r"\berrors?\b|\bfatal\b", re.IGNORECASE)


def crash_message(e: BaseException, limit: int = 2000) -> str:
    """The kernel's exception as the row's message, at most `limit` characters. A longer one keeps its head and
    then its lines that name an error: a JIT build log (FlashInfer's Ninja output) has the compiler's errors
    in its middle, which neither a plain cut nor the traceback's tail kept (campaigns/flashinfer-fa3-cascade-h100-2026-11-24.md)."""
    text = f"{type(e).__name__}: {e}"
    if len(text) <= limit:
        return text
    errors = [line.strip() for line in text.splitlines()[1:] if _ERROR_LINE.search(line) and len(line) < 600]
    tail = " | ".join(dict.fromkeys(errors))
    if not tail:
        return text[:limit]
    return (text[:max(limit // 3, limit - len(tail) - 5)] + " ... " + tail)[:limit]


def oracle_and_baseline(inputs: Inputs, base_dtype: torch.dtype, packed: bool = True,
                        rounding: ProbabilityRounding | None = None) -> tuple[Expected, Expected, PackedScores | None]:
    """(expected, baseline, the packed float64 scores or None): in one padded pass per dtype where the case is
    packable (reference/packed.py), else the chunked per-sequence oracle. `rounding`: how the kernel holds its
    probabilities for P.V, which the baseline follows (fuzz.tolerance.probability_rounding)."""
    if packed and packable(inputs):
        layout = PackedLayout.of(inputs)  # the masks, rows and biases both passes share
        scores = pack_scores(inputs, layout=layout)
        return scores.attend(), packed_baseline(inputs, base_dtype, layout, rounding), scores
    return attention(inputs), attention(inputs, dtype=base_dtype, reorder=True, rounding=rounding), None


def attended_writes(case: Case, actual: Actual) -> dict:
    """The Inputs fields the kernel attended over that its library wrote with scales of its own computing (its
    per-token-head or dynamically scaled fp8 cache, its fp8 query): replaced in the oracle's inputs when given."""
    out = {}
    if actual.written_cache is not None and scales_computed(case):
        out["cache"] = actual.written_cache
    if actual.query_fp8 is not None and case.cache is not None and case.cache.quant.q_fp8_scale is not None:
        out["query_fp8"] = actual.query_fp8.reshape(case.num_tokens, case.num_heads, -1)
    return out


def _is_on(t: Tensor, device: torch.device) -> bool:
    """Whether `t` lives on `device` ("cuda" without an index: the current GPU, as a backend names its device)."""
    if t.device.type != device.type:
        return False
    index = torch.cuda.current_device() if device.type == "cuda" and device.index is None else device.index
    return t.device.type != "cuda" or t.device.index == index


def _moved(tensors: list[Tensor | None], device: torch.device) -> list[Tensor | None] | None:
    """`tensors` on `device` in one copy (`reference.transfer.move_all`), None kept in place; None when every one is
    there already."""
    present = [t for t in tensors if t is not None]
    if all(_is_on(t, device) for t in present):
        return None
    moved = iter(transfer.move_all(present, device))
    return [None if t is None else next(moved) for t in tensors]


def on_host(expected: Expected, baseline: Expected, actual: Actual,
            extra: tuple[Tensor, ...] = ()) -> tuple[Expected, Expected, Actual, tuple[Tensor, ...]]:
    """The oracle's, the baseline's and the kernel's outputs (and `extra` tensors of the oracle's device) on the CPU,
    in one copy: the judge reads them with a few dozen small reductions, each a device synchronisation on a GPU
    that 16 workers share (a written cache stays where the kernel wrote it: it is compared bit for bit there)."""
    fields = [expected.output, expected.lse, expected.num_visible, expected.logit_spread, baseline.output, baseline.lse,
              actual.output, actual.lse, actual.output_buffer, *extra]
    moved = _moved(fields, torch.device("cpu"))
    if moved is None:  # a host oracle's case: nothing to move
        return expected, baseline, actual, tuple(extra)
    e_out, e_lse, e_seen, e_spread, b_out, b_lse, a_out, a_lse, a_buf, *rest = moved
    return (Expected(e_out, e_lse, e_seen, e_spread), Expected(b_out, b_lse, None),
            replace(actual, output=a_out, lse=a_lse, output_buffer=a_buf), tuple(rest))


def shift_error(inputs: Inputs, expected: Expected, scores: PackedScores | None) -> tuple[Tensor, Tensor]:
    """(max |output under a one-key mask shift - expected output|, whether the shift changed any row's mask), as
    0-dim tensors on the oracle's device: the caller reads them back with what else it reads (on a GPU shared by a
    campaign's workers each synchronisation waits its turn)."""
    if scores is not None:  # the shifted mask over the oracle's own scores: a softmax and a p.v product, some 60 operations
        shifted, changed = scores.shifted(shift_by_one_key)
        return _worst(shifted.output, expected.output), changed
    # row by row from the oracle's output and LSE: a dot product a row, not a pass over the case's scores (some 360
    # operations a tile-tier case, which on a GPU are as many launches)
    return key_changes(inputs, expected, shift_by_one_key)


def _worst(moved: Tensor, expected: Tensor) -> Tensor:
    """max |moved - expected| (0 when empty), `moved` taken over (a fresh output of the shifted pass)."""
    return moved.sub_(expected).abs_().amax() if moved.numel() else moved.new_zeros(())


def kernel_on(actual: Actual, device: torch.device) -> Actual:
    """`actual` with its output, LSE and output buffer on `device`, in one copy (a kernel's outputs judged beside an
    oracle that ran on the host: each tensor's own copy was a synchronisation of a GPU the campaign's workers share)."""
    moved = _moved([actual.output, actual.lse, actual.output_buffer], device)
    if moved is None:
        return actual
    out, lse, buffer = moved
    return replace(actual, output=out, lse=lse, output_buffer=buffer)


def judge_in_one_read(row: dict[str, Any], backend: Backend, inputs: Inputs, expected: Expected,
                      baseline: Expected, actual: Actual, scores: PackedScores | None,
                      check_blind: bool) -> tuple[float, bool] | None:
    """Judge a case in one read back, wherever its oracle ran: the blind check is queued first and its answers cross
    with the judge's summary (fuzz.summary), or with the outputs the host judges where the case is not the common one.
    The kernel's outputs are on the oracle's device (kernel_on). Returns the blind check's (largest change, any mask
    changed), or None without `check_blind`."""
    shift = shift_error(inputs, expected, scores) if check_blind else ()
    read = judge_on_device(row, backend.caps, inputs, expected, baseline, actual, shift)
    if read is None:
        on_cpu_expected, on_cpu_baseline, on_cpu_actual, moved = on_host(expected, baseline, actual, shift)
        judge(row, backend.caps, inputs, on_cpu_expected, on_cpu_baseline, on_cpu_actual)
        read = [float(t) for t in moved]
    return (read[0], bool(read[1])) if check_blind else None


def evaluate(backend: Backend, case: Case, device: str | None = None, check_blind: bool = True,
             oracle_cpu_max: int = ORACLE_CPU_MAX, base: dict[str, Any] | None = None,
             packed: bool = True) -> Evaluation:
    """Run `case` on `backend` and judge it against the oracle. Never raises for kernel errors.
    `base`: base_row(backend, case) when the caller built it already (a campaign worker's heartbeat).
    `packed`: the oracle's padded one-pass formulation where the case fits it (False: always the chunked one)."""
    # no autograd records (version counters, views): 0.86-0.94x the CPU time of cases of small tensor operations
    # (benchmarks/grad_mode.py, results/throughput/harness-inference-mode-h200-2026-11-28.md)
    with torch.inference_mode():
        evaluation = _evaluate(backend, case, device, check_blind, oracle_cpu_max, base, packed)
    if evaluation.inputs is not None:  # the Evaluation outlives the case's turn: the widened keys it kept need not
        evaluation.inputs.widened.clear()
    return evaluation


def _evaluate(backend: Backend, case: Case, device: str | None, check_blind: bool, oracle_cpu_max: int,
              base: dict[str, Any] | None, packed: bool) -> Evaluation:
    row = dict(base) if base is not None else base_row(backend, case)
    reasons = backend.not_supported_reasons(case)
    if reasons:
        row.update(verdict=Verdict.UNSUPPORTED.value, message="; ".join(reasons))
        return Evaluation(row)
    dev = torch.device(device or backend.device())
    odev = torch.device("cpu") if score_elements(case) <= oracle_cpu_max else dev
    t0 = time.perf_counter()
    host = materialize(case, "cpu")
    oracle_inputs = to_device(host, odev)
    kernel_inputs = oracle_inputs if odev == dev else to_device(host, dev)
    # Not waited for here: the copy runs while a host oracle computes, and a GPU oracle is queued behind it (one
    # synchronisation fewer a case: benchmarks/results/throughput/harness-inference-mode-h200-2026-11-28.md).
    copied = _copied(dev)
    t1 = time.perf_counter()
    base_dtype = baseline_dtype(case.dtype, case.kv_cache_dtype)
    rounding = probability_rounding(case, backend.caps.fp8_probabilities)
    expected, baseline, scores = oracle_and_baseline(oracle_inputs, base_dtype, packed, rounding)
    _sync(odev)
    t2 = time.perf_counter()
    row.update(materialize_s=t1 - t0, oracle_s=t2 - t1, oracle_device=odev.type)
    try:
        if copied is not None:  # whole inputs, also for a kernel that runs on a stream of its own
            copied.synchronize()
        actual = backend.run(kernel_inputs)
        # beside the oracle, in one copy that also waits for the kernel: a device error in either is this case's crash
        actual = kernel_on(actual, odev)
        _sync(dev)
    except Unsupported as e:
        row.update(verdict=Verdict.UNSUPPORTED.value, message=f"library refused a declared case: {e}",
                   declaration_bug=True, kernel_s=time.perf_counter() - t2)
        return Evaluation(row, oracle_inputs, expected)
    except Exception as e:  # the kernel's error is a finding, not the harness's
        row.update(verdict=Verdict.CRASH.value, message=crash_message(e), symptom="crash",
                   traceback=traceback.format_exc()[-4000:], kernel_s=time.perf_counter() - t2)
        return Evaluation(row, oracle_inputs, expected)
    t3 = time.perf_counter()
    row["kernel_s"] = t3 - t2
    if "first_call_s" in actual.notes:  # a JIT compile happened in this call: keep it apart
        row["compile_s"] = actual.notes["first_call_s"]
    if actual.notes:
        row["notes"] = json.dumps(actual.notes, default=str)
    written = attended_writes(case, actual)
    if written:
        # writers that compute their scales may flip codes at rounding ties (judge_writes bounds them): the attention
        # the kernel computed is judged over the codes its library wrote, not over the oracle's
        over_written = to_device(replace(kernel_inputs, **written), odev)
        expected, baseline, scores = oracle_and_baseline(over_written, base_dtype, packed, rounding)
    shift = judge_in_one_read(row, backend, oracle_inputs, expected, baseline, actual, scores, check_blind)
    if shift is not None and row["verdict"] == Verdict.PASS.value:
        visible_change, changed = shift
        row["mask_shift_error"] = visible_change if changed else None
        if not changed:  # every row sees 0 or 1 key of its 0 or 1: no mask to get wrong, not a blind spot
            row["message"] = "no row has a key to add or drop: the case checks contracts, not masks"
        elif visible_change <= row["limit"]:
            row["verdict"] = Verdict.BLIND.value
            row["message"] = (f"a one-key mask shift moves the output by {visible_change:.3g} <= limit "
                              f"{row['limit']:.3g}: this case cannot see mask bugs")
    row["compare_s"] = time.perf_counter() - t3
    return Evaluation(row, oracle_inputs, expected, actual)
