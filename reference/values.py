"""A case's queries, keys and values: normal draws shaped by its value distribution (`Case.values`).

Every value is drawn on the host from one torch generator seeded by `case.seed`, in a fixed order (the queries, then
the shared prefix, the prototypes and each sequence in turn), so a saved case replays the same tensors
(tests/reference/test_saved_inputs.py pins every saved case's). `reference.inputs.materialize` casts, caches and moves
them.

Where the normal draws come from is `Values.source`. GENERATOR: each tensor is torch.randn of the case's generator.
TABLE: a tensor of TABLE_ABOVE values or more is made of rows of one fixed table of 2^24 normal draws (its own seed,
the same on every machine): for each token the generator draws where its row of values starts, and the row is the
table's next values from there. Each row's values are independent normal draws; two rows share values only where their
offsets fall within a row's length of each other. A long case's millions of values cost a copy instead of a normal
draw each: 3-8x less on one CPU thread (a [16384, 8, 128] tensor 45 against 134 ms, about half of the 45 faulting in fresh pages;
[20, 8, 128] 31 against 119 us); smaller tensors stay with the generator, cheaper there ([4, 2, 64]: 4 against 15 us).
"""
from __future__ import annotations

import functools
import itertools
import math

import torch
from torch import Tensor

from .case import BlockTableKind, Case, KVLayout, ValueDistribution
from .kinds import ValueSource

TABLE_SIZE = 1 << 24  # float32 normal draws (64 MiB), made once per process on first use
TABLE_SEED = 0x7AB1E
TABLE_ABOVE = 4096  # values in a tensor from which it is read from the table (below: torch.randn is cheaper)


@functools.cache
def normal_table() -> Tensor:
    """The fixed table of TABLE_SIZE float32 normal draws that TABLE cases read their rows from."""
    return torch.randn(TABLE_SIZE, generator=torch.Generator().manual_seed(TABLE_SEED))


def normal(case: Case, gen: torch.Generator, rows: int, *shape: int) -> Tensor:
    """[rows, *shape] float32 normal draws for `case`, from `gen` as its Values.source says (a fresh tensor: callers
    change it in place)."""
    size = math.prod(shape)
    if case.values.source == ValueSource.GENERATOR or rows * size < TABLE_ABOVE:
        return torch.randn(rows, *shape, generator=gen)
    table = normal_table()
    starts = torch.randint(0, table.numel() - size + 1, (rows,), generator=gen)
    return table.unfold(0, size, 1).index_select(0, starts).view(rows, *shape)


def draw_queries(case: Case, gen: torch.Generator) -> Tensor:
    """[N, H, D] float32 queries of the case's value distribution, drawn from `gen` (after nothing else)."""
    q = normal(case, gen, case.num_tokens, case.num_heads, case.head_size)
    if case.values.distribution == ValueDistribution.OUTLIERS:
        channels = torch.randint(0, case.head_size, (2,), generator=gen)
        q[:, :, channels] *= 8.0
    q = q * case.values.logit_scale
    if case.values.distribution == ValueDistribution.RECENT:
        u, a = recency_direction(case)
        q = q + a * u.repeat_interleave(case.num_heads // case.num_kv_heads, 0)[None]
    elif case.values.distribution == ValueDistribution.EDGE:
        u = recency_direction(case)[0].repeat_interleave(case.num_heads // case.num_kv_heads, 0)  # [H, D]
        q = without_direction(q, u)
        starts = [0, *itertools.accumulate(case.query_lens)]
        for i, n in enumerate(case.kv_lens):
            q[starts[i]:starts[i + 1]] += edge_amplitude(case, n) * u
    if case.values.query_zero_dims is not None:  # drawn above all the same: the other dimensions keep their values
        start, end = case.values.query_zero_dims
        q[..., start:end] = 0
    return q


def draw_keys_values(case: Case, gen: torch.Generator) -> tuple[list[Tensor], list[Tensor]]:
    """Per-sequence keys and values, float32, drawn from `gen` after the queries; a shared-prefix cache shares its
    first blocks' values too."""
    h, d, dv = case.num_kv_heads, case.head_size, case.value_size
    shared = 0
    if case.cache is not None and case.cache.table == BlockTableKind.SHARED_PREFIX:
        shared = case.cache.prefix_blocks * case.cache.block_size
    prefix_k = normal(case, gen, shared, h, d)
    prefix_v = normal(case, gen, shared, h, dv)
    prototypes = normal(case, gen, 4, h, d)
    keys, values = [], []
    for n in case.kv_lens:
        k = normal(case, gen, n, h, d)
        v = normal(case, gen, n, h, dv)
        if case.values.distribution == ValueDistribution.SHARP:
            # Near-duplicate keys: a few prototypes plus small noise, so softmax rows are peaked
            # and nearly tied; masks that admit or drop one key move the output visibly.
            which = torch.randint(0, 4, (n,), generator=gen)
            k = prototypes[which] * 2.0 + 0.05 * k
        elif case.values.distribution == ValueDistribution.OUTLIERS and n > 0:
            tokens = torch.randint(0, n, (max(1, n // 16),), generator=gen)
            if case.values.outliers_at_edge:  # the key a one-key mask shift moves then weighs like the outliers,
                tokens = torch.cat([tokens, torch.tensor([n - 1])])  # which otherwise hide it (19 % were blind)
            k[tokens] *= 8.0
        elif case.values.distribution == ValueDistribution.RECENT:
            u, a = recency_direction(case)
            k = k.add_(a * recency_ramp(n)[:, None, None] * u[None])
        elif case.values.distribution == ValueDistribution.EDGE and n > 0:
            u = recency_direction(case)[0]
            k = without_direction(k, u)
            k[-1] += edge_amplitude(case, n) * u
        if n > 0 and case.values.edge_value_gain != 1.0:
            v[-1] *= case.values.edge_value_gain
        if shared:  # (a last key inside the shared prefix keeps the prefix's value)
            k[:shared], v[:shared] = prefix_k, prefix_v
        if case.cache is not None and case.cache.layout == KVLayout.MLA_LATENT:
            v = k[..., :dv].clone()  # MLA: the value is the latent itself (its first kv_lora_rank dims)
        keys.append(k)
        values.append(v)
    return keys, values


RECENT_BOOST = 6.0  # logit added to a sequence's last key (in scaled units): it takes about e^6 more weight


def recency_ramp(n: int) -> Tensor:
    """[n] in [0, 1]: max((j / (n-1))^2, 2^(-(n-1-j)/4)): rising over the sequence, and 1 on its last
    keys however long it is (a long sequence's edge keys still stand out)."""
    j = torch.arange(n, dtype=torch.float32)
    return torch.maximum((j / max(n - 1, 1)) ** 2, torch.exp2(-(n - 1 - j) / 4))


def recency_direction(case: Case) -> tuple[Tensor, float]:
    """(u [H_kv, D] unit vectors, a) of the RECENT distribution, from their own generator (seed ^ 0x5EED) so
    the other draws keep their order: query += a*u, key j += a*recency_ramp(n)[j]*u, so q.k gains up to
    RECENT_BOOST (after scaling) on a sequence's latest keys. A causal or window edge then sits on keys
    with real weight, and moving it by one key moves the output (no blind case)."""
    u = torch.randn(case.num_kv_heads, case.head_size, generator=torch.Generator().manual_seed(case.seed ^ 0x5EED))
    return u / u.norm(dim=-1, keepdim=True).clamp(min=1e-12), math.sqrt(RECENT_BOOST / case.softmax_scale)


EDGE_MARGIN = 1.0  # the last key's logit above log(sum of the others' weights): about e/(1+e) of a row's weight


def edge_boost(case: Case, n: int) -> float:
    """The logit the EDGE distribution gives the last of `n` keys: log of the other n-1 keys' expected total
    weight, plus EDGE_MARGIN, plus s. The scores are about N(0, s^2), s = logit_scale * sqrt(D) * softmax_scale,
    so the others' total is (n-1) e^(s^2/2) while s <= sqrt(2 log(n-1)), and its largest term
    e^(s sqrt(2 log(n-1))) beyond (where the lognormal mean overstates a finite sum); the last key's own
    N(0, s^2) part would sink it under that in a third of the rows without the extra s."""
    log_n = math.log(max(n - 1, 1))
    s = case.values.logit_scale * math.sqrt(case.head_size) * case.softmax_scale
    log_total = log_n + s * s / 2 if s * s <= 2 * log_n else s * math.sqrt(2 * log_n)
    return log_total + EDGE_MARGIN + s


def edge_amplitude(case: Case, n: int) -> float:
    """a with softmax_scale * a^2 = edge_boost: added along u to the queries of a sequence of n keys and
    to its last key (both are orthogonal to u otherwise), so that key's score gains exactly the boost."""
    return math.sqrt(edge_boost(case, n) / case.softmax_scale)


def without_direction(x: Tensor, u: Tensor) -> Tensor:
    """x [..., H, D] with its component along the unit vectors u [H, D] removed, in place (x is a fresh draw: one
    long-tier tensor fewer to allocate)."""
    return x.sub_((x * u).sum(-1, keepdim=True) * u)
