"""A kernel with two independent bugs, for the bucket tests: `--backend-spec tests.fuzz.two_bugs:backends`.

Bug 1: a row that sees no key gets 1.0 instead of 0 (an `empty-row-output` contract symptom only).
Bug 2: in a causal sequence with more queries than keys, a row that has at least two keys is aligned one
key short (an `output` mismatch on rows with keys only; rows with no key stay 0 under bug 2 alone).
A case with q > k >= 2, causal, shows both; one with no key shows bug 1 alone; q = k shows neither.
"""
from __future__ import annotations

import math

import torch

from backends.base import Actual, Backend, Capabilities, Feature
from reference.case import AttentionType, DType


class TwoBugs(Backend):
    name = "test-two-bugs"
    library = "torch"
    description = "kernel cases in float32 with two planted bugs: garbage in empty rows, q > k alignment"
    caps = Capabilities(devices=frozenset({"cpu"}), dtypes=frozenset({DType.FLOAT32}), head_sizes=(8, 16),
                        attn_types=frozenset({AttentionType.KERNEL}),
                        features=frozenset({Feature.MORE_QUERIES_THAN_KEYS}), lse_base=None)

    def run(self, inputs) -> Actual:
        case = inputs.case
        out = torch.zeros(case.num_tokens, case.num_heads, case.value_size)
        for i, seq in enumerate(case.sequences):
            a, b = int(inputs.query_start_loc[i]), int(inputs.query_start_loc[i + 1])
            q, k, v = inputs.query[a:b].float(), inputs.keys[i].float(), inputs.values[i].float()
            n_q, n_k = q.shape[0], k.shape[0]
            qp = torch.arange(n_q)[:, None] + (n_k - n_q)  # bottom-right
            kp = torch.arange(n_k)[None, :]
            ok = (kp <= qp) if case.causal else torch.ones(n_q, n_k, dtype=torch.bool)
            if case.causal and n_q > n_k >= 1:  # bug 2: one key short on rows that have two or more
                short = kp <= qp - 1
                ok = torch.where((short.sum(-1) >= 1)[:, None], short, ok)
            s = torch.einsum("qhd,khd->hqk", q, k) * case.softmax_scale
            s = s.masked_fill(~ok[None], -math.inf)
            p = torch.softmax(s, -1).nan_to_num(0.0)
            rows = torch.einsum("hqk,khd->qhd", p, v)
            rows[~ok.any(-1)] = 1.0  # bug 1: garbage where no key is visible
            out[a:b] = rows
        return Actual(output=out)


def backends():
    return [TwoBugs()]
