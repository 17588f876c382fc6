"""Known failures: each names the backend, a predicate over the Case, and the upstream issue.

A `crashes=True` entry is never launched (it would kill or poison the worker): its row is written
as a known crash straight away (`known_crash_for`, before the launch). Any other entry still runs; a failing row is
marked known, and a row that *passes* is flagged `known_fixed` so a stale entry gets noticed (`known_for`, after the
evaluation: a predicate over the inputs, `uses_inputs`, reads the tensors the evaluation drew, on its device).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from backends._convert import torch_before
from reference.attention import (CHUNK_ELEMENTS, alibi_terms, block_scores, new_token_bias, query_for_oracle,
                                 sequence_kv, sequence_masks)
from reference.case import Case, KVCacheDType
from reference.inputs import Inputs, materialize


@dataclass(frozen=True)
class Finding:
    backend: str
    match: Callable[[Case], bool]
    link: str
    summary: str
    crashes: bool = False
    symptom: str | None = None  # regex on the failing row's message; None: any failure of a matching case
    uses_inputs: bool = False  # match(case, inputs): a predicate over the case's tensors (never a crash entry)

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


def _fp8_sequence_without_keys(case: Case) -> bool:
    return case.kv_cache_dtype.is_fp8 and any(k == 0 for k in case.kv_lens)


# exp2 overflows float32 at 2^128: a sink more than 128 ln 2 above a row's largest score, folded in as
# exp2((sink - max) log2 e) after a key loop whose running max never took the sink in, makes the row sum inf
SINK_OVERFLOW = 128 * math.log(2)


def _widened(case: Case, inputs: Inputs) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(the query, each sequence's keys) in float64, as the oracle reads them: the sink check's bound and its scores
    share one widening."""
    return (query_for_oracle(inputs, torch.float64),
            [sequence_kv(inputs, i, torch.float64)[0] for i in range(len(case.sequences))])


def largest_sink_excess(case: Case, inputs: Inputs | None = None,
                        widened: tuple[torch.Tensor, list[torch.Tensor]] | None = None) -> float:
    """max over (token, head) rows that see a key of sinks[h] - (the row's largest visible score), in float64;
    -inf without sinks or when no row sees a key. The scores are the oracle's (`reference.attention.block_scores`), over
    `inputs` where given (the evaluation's, on their device), else the case's inputs drawn on the CPU; `widened`: their
    `_widened` form where the caller has it."""
    if case.sinks is None:
        return -math.inf
    inputs = materialize(case) if inputs is None else inputs
    query, keys = widened or _widened(case, inputs)
    masks, positions = sequence_masks(case, query.device)
    sinks = inputs.sinks.to(torch.float64)
    alibi = alibi_terms(inputs, torch.float64)
    excess = -math.inf
    for i, seq in enumerate(case.sequences):
        start, k = int(inputs.query_start_loc[i]), keys[i]
        if seq.query_len == 0 or k.shape[0] == 0:
            continue
        mask = masks[i]
        bias = None if inputs.qq_bias is None else new_token_bias(inputs.qq_bias, seq.query_len, k.shape[0])
        q_pos, k_pos = positions[i], torch.arange(k.shape[0], device=query.device)
        step = max(1, CHUNK_ELEMENTS // (case.num_heads * k.shape[0]))  # the oracle's memory bound
        for qs in range(0, seq.query_len, step):
            qe = min(seq.query_len, qs + step)
            scores = block_scores(query[start + qs:start + qe], k, mask[:, qs:qe], scale=case.softmax_scale,
                                  q_pos=q_pos[qs:qe], k_pos=k_pos, alibi=alibi, soft_cap=case.soft_cap,
                                  bias=None if bias is None else bias[qs:qe])
            row_max = scores.amax(-1)  # [H, q]
            seen = torch.isfinite(row_max)
            if bool(seen.any()):
                excess = max(excess, float((sinks[:, None] - row_max)[seen].max()))
    return excess


def score_floor(case: Case, inputs: Inputs, widened: tuple[torch.Tensor, list[torch.Tensor]] | None = None) -> float:
    """A lower bound of every visible score, in float64, from norms alone: q.k x scale >= -scale |q| |k|
    (Cauchy-Schwarz; a soft-cap keeps it above -cap), less the largest |ALiBi| term (|slope| times a distance below
    kv_len + query_len) and the largest |bias|."""
    query, keys = widened or _widened(case, inputs)
    largest_k = max((float(k.norm(dim=-1).max()) for k in keys if k.numel()), default=0.0)
    largest_q = float(query.norm(dim=-1).max()) if query.numel() else 0.0
    floor = -abs(case.softmax_scale) * largest_q * largest_k
    if case.soft_cap:
        floor = max(floor, -case.soft_cap)
    if inputs.alibi_slopes is not None:
        reach = max(s.query_len + k.shape[0] for s, k in zip(case.sequences, keys))
        floor -= float(inputs.alibi_slopes.double().abs().max()) * reach
    if inputs.qq_bias is not None:
        floor -= float(inputs.qq_bias.double().abs().max())
    return floor


def _sink_overflows_float32(case: Case, inputs: Inputs | None = None) -> bool:
    """largest_sink_excess > SINK_OVERFLOW, the scores computed only where the norms' bound (score_floor) leaves it
    open: most drawn sinks lie in [-4, 6], and scoring every sink case again cost 1.4-40 ms a case on the CPU."""
    if case.sinks is None:
        return False
    inputs = materialize(case) if inputs is None else inputs
    widened = _widened(case, inputs)
    if float(inputs.sinks.double().max()) - score_floor(case, inputs, widened) <= SINK_OVERFLOW * (1 - 1e-9):
        return False
    return largest_sink_excess(case, inputs, widened) > SINK_OVERFLOW


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
            "8,192 rows; on an H100 it also happens at 9-62 rows (benchmarks/results/repro/vllm-hadacore-tail-rows.py)",
            symptom=r"int4 cache decodes"),
    *(Finding(name, _sink_overflows_float32, "https://github.com/Dao-AILab/flash-attention/pull/2752",
              "FA4's Softmax.finalize adds the sink as exp2((sink - row max) log2 e) after the key loop, the max never "
              "taking the sink in: a sink 88.72 (128 ln 2) above every score of a row overflows float32 and the LSE is "
              "+inf (the output, scaled by 1/inf, is right to e^-88). Raised in that PR's review for SM80 / SM120; "
              "measured here on SM90, flash-attn-4 4.0.0b36 (tools/analysis/emulate-fa4-sink-overflow.py: 481 of 481 rows)",
              symptom=r"NaN/Inf LSE", uses_inputs=True)
      for name in ("fa4-varlen", "fa4-paged")),
    Finding("vllm-flashmla", _fp8_sequence_without_keys, "https://github.com/vllm-project/vllm/issues/33664",
            "FlashMLA's fp8 dense decode (flash_mla_with_kvcache_fp8) with a sequence of 0 cached keys (what vLLM's "
            "CUDA-graph padding hands it) hits an illegal memory access, or when it survives writes garbage rows "
            "(up to 3.4e+38); vllm 0.26.0's FlashMLA builder does not clamp seq_lens (the fix proposed in "
            "vllm#35969); 84 crashes in 6,121 examples on an H100", crashes=True),
)


def known_crash_for(backend: str, case: Case) -> Finding | None:
    """The known crash the case would run into (checked before its launch): its predicates read the case alone."""
    for finding in KNOWN:
        if finding.crashes and finding.backend == backend and finding.match(case):
            return finding
    return None


def known_for(backend: str, case: Case, inputs: Inputs | None = None) -> Finding | None:
    """The known finding the case matches; `inputs`: the evaluation's tensors, which a predicate over the inputs reads
    instead of drawing them again (FA4's sink overflow: 1.3-6 ms a case on the CPU, drawn and scored once more)."""
    for finding in KNOWN:
        if finding.backend == backend and (finding.match(case, inputs) if finding.uses_inputs else finding.match(case)):
            return finding
    return None
