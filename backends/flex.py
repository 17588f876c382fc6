"""FlexAttention: the whole batch in one call, sequences separated by a document mask.

Queries [1, H, num_tokens, D] and keys [1, H_kv, total_keys, D] are packed; `mask_mod` admits a key
only from the query's own sequence and under the Case's causal / window / chunk rules; ALiBi and
soft-cap are a `score_mod`. Captured metadata are tensors, so the compiled variant does not recompile
per case. `flex` runs eagerly; `flex-compiled` goes through torch.compile (inductor).
"""
from __future__ import annotations

import warnings

import torch

from reference.case import AlibiConvention, AttentionType, DType
from reference.inputs import Inputs

from ._convert import key_offset
from .base import Actual, Backend, Capabilities, Feature, LseBase

FEATURES = frozenset({Feature.GQA, Feature.MQA, Feature.WINDOW, Feature.ALIBI, Feature.SOFT_CAP,
                      Feature.CHUNKED_LOCAL, Feature.CONTEXT})
_COMPILED = {}


def _packed_metadata(inputs: Inputs, device) -> dict[str, torch.Tensor]:
    """Per packed query and key: sequence id and logical position."""
    case = inputs.case
    q_seq, q_pos, k_seq, k_pos = [], [], [], []
    for i, s in enumerate(case.sequences):
        q_seq.append(torch.full((s.query_len,), i))
        q_pos.append(torch.arange(s.query_len) + key_offset(case, i))
        k_seq.append(torch.full((case.kv_lens[i],), i))
        k_pos.append(torch.arange(case.kv_lens[i]))
    return {name: torch.cat(parts).to(device) for name, parts in
            (("q_seq", q_seq), ("q_pos", q_pos), ("k_seq", k_seq), ("k_pos", k_pos))}


class FlexBackend(Backend):
    library = "torch"

    def __init__(self, name: str, compiled: bool, device: str) -> None:
        self.name, self.compiled, self._device = name, compiled, device
        self.description = ("flex_attention " + ("through torch.compile" if compiled else "eager") +
                            ", one packed call, document mask_mod, ALiBi/soft-cap score_mod")
        self.caps = Capabilities(devices=frozenset({device}), dtypes=frozenset(DType),
                                 head_sizes=(16, 32, 64, 128) if compiled else (16, 24, 32, 40, 64, 72, 80, 96, 128),
                                 attn_types=frozenset(AttentionType), features=FEATURES, lse_base=LseBase.E)

    def device(self) -> str:
        return self._device

    def availability(self) -> str | None:
        if self._device == "cuda" and not torch.cuda.is_available():
            return "no CUDA device"
        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError as e:
            return f"torch.nn.attention.flex_attention missing: {e}"
        return None

    def _function(self):
        from torch.nn.attention.flex_attention import flex_attention

        if not self.compiled:
            return flex_attention
        if "fn" not in _COMPILED:
            _COMPILED["fn"] = torch.compile(flex_attention, dynamic=True)
        return _COMPILED["fn"]

    def run(self, inputs: Inputs) -> Actual:
        from torch.nn.attention.flex_attention import create_block_mask

        case = inputs.case
        dev = inputs.query.device
        meta = _packed_metadata(inputs, dev)
        q_seq, q_pos, k_seq, k_pos = meta["q_seq"], meta["q_pos"], meta["k_seq"], meta["k_pos"]
        causal = case.attn_type == AttentionType.DECODER
        window = case.sliding_window
        symmetric_window = case.attn_type == AttentionType.ENCODER_ONLY
        chunk = case.attn_chunk_size

        def mask_mod(b, h, qi, ki):
            qp, kp = q_pos[qi], k_pos[ki]
            ok = q_seq[qi] == k_seq[ki]
            if causal:
                ok = ok & (kp <= qp)
            if window is not None:
                ok = ok & (qp - kp < window)
                ok = ok & ((kp - qp < window) if symmetric_window else (kp <= qp))
            if chunk is not None:
                ok = ok & (qp // chunk == kp // chunk)
            return ok

        slopes = None if inputs.alibi_slopes is None else inputs.alibi_slopes.to(dev)
        cap = case.soft_cap
        symmetric_alibi = case.alibi is not None and case.alibi.convention == AlibiConvention.SYMMETRIC

        def score_mod(score, b, h, qi, ki):
            if cap is not None:
                score = cap * torch.tanh(score / cap)
            if slopes is not None:
                d = (k_pos[ki] - q_pos[qi]).to(score.dtype)
                score = score + slopes[h] * (-d.abs() if symmetric_alibi else d)
            return score

        n_q, n_k = q_seq.numel(), k_seq.numel()
        q = inputs.query.transpose(0, 1)[None]
        k = torch.cat(inputs.keys).transpose(0, 1)[None]
        v = torch.cat(inputs.values).transpose(0, 1)[None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            block_mask = create_block_mask(mask_mod, None, None, n_q, n_k, device=dev)
            out, lse = self._function()(q, k, v, score_mod=score_mod if (cap or slopes is not None) else None,
                                        block_mask=block_mask, scale=case.softmax_scale,
                                        enable_gqa=case.num_heads != case.num_kv_heads, return_lse=True)
        return Actual(output=out[0].transpose(0, 1), lse=lse[0].transpose(0, 1).float())


def flex_backends() -> list[Backend]:
    return [FlexBackend("flex", False, "cpu"), FlexBackend("flex-compiled", True, "cpu"),
            FlexBackend("flex-cuda", False, "cuda"), FlexBackend("flex-compiled-cuda", True, "cuda")]
