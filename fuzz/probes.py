"""Convention probes: tiny hand-built cases, each separating two readings of one convention.

Random cases find numeric bugs; a probe asks one question a kernel's documentation answers, so a
failure is a *convention* finding (the backend does not follow what it declares), reported apart
from numeric mismatches. A probe runs where the backend declares its case; it is judged by the same
`evaluate` as fuzzed cases (output, LSE in the declared base, empty-row contract).

| probe | question | case |
|---|---|---|
| causal_alignment | bottom-right or top-left? | kernel, 2 queries over 4 keys, causal (or a decoder with context) |
| window_left | does left=1 mean one key back plus the query's own? | kernel (1, 0) window, or sliding_window=2 |
| window_right | does right=1 see one key ahead? | kernel (0, 1) window, or encoder_only sliding_window=2 |
| window_unbounded[spelling] | is an unbounded side unbounded, in each spelling the backend declares? | kernel (None, 0) / (0, None) |
| empty_row | output 0 and the declared LSE for a row with no key | kernel 3 queries over 1 key, causal bottom-right; or cross attention with 0 keys |
| lse_base | LSE in the declared base | one key: LSE = its logit |
| soft_cap_before_mask | soft-cap on the scaled logits | soft_cap=1 on logits of size ~8 |
| default_scale | scale=None means head_size ** -0.5 | large logits, scale unset |
| sink | the sink joins the denominator with no value | one key, sink 0: output v/2 |
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backends.base import Backend
from backends.spellings import UNBOUNDED_WINDOW
from reference.case import AttentionType, CacheSpec, Case, SequenceSpec, Values

from .compare import evaluate


@dataclass(frozen=True)
class Probe:
    name: str
    question: str
    variants: Callable[[Backend], list[Case]]  # candidate cases, most specific first
    # an encoding whose every declared spelling is probed apart (rows `name[spelling]`): FA4 took a lone -1 window
    # side as a bound while None passed (benchmarks/results/campaigns/fa4-lone-minus-one-window-2026-11-27.md)
    spelled: str | None = None


def spelled_variants(backend: Backend, probe: Probe, case: Case) -> list[tuple[str, Case]]:
    """(row name, case) for each spelling of `probe.spelled` the backend declares, or the probe's own case."""
    values = dict(backend.caps.encodings).get(probe.spelled, ()) if probe.spelled else ()
    if not values:
        return [(probe.name, case)]
    kept = tuple(e for e in case.encodings if e[0] != probe.spelled)
    return [(f"{probe.name}[{v}]", case.replace(encodings=kept + ((probe.spelled, v),))) for v in values]


def _caches(backend: Backend) -> list[CacheSpec | None]:
    """A cache the backend reads (its first declared layout and block size), else none."""
    caps = backend.caps
    if not caps.kv_layouts:
        return [None]
    layout = sorted(caps.kv_layouts, key=lambda x: x.value)[0]
    return [CacheSpec(layout=layout, block_size=sorted(caps.block_sizes)[0],
                      finite_canaries=caps.finite_canaries_only)]


def _base(backend: Backend, **kw) -> dict:
    caps = backend.caps
    dtype = sorted(caps.dtypes, key=lambda d: d.value)[0]
    head = 64 if 64 in caps.head_sizes else sorted(caps.head_sizes)[0]
    return dict(dtype=dtype, head_size=head, num_heads=2, num_kv_heads=2,
                values=Values(logit_scale=2.0), **kw)


def _kernel(backend: Backend, seqs, **kw) -> Case:
    return Case(sequences=tuple(SequenceSpec(query_len=q, key_len=k) for q, k in seqs),
                attn_type=AttentionType.KERNEL, **_base(backend, **kw))


def _kernels(backend: Backend, seqs, **kw) -> list[Case]:
    """The kernel case, then the same through each cache the backend reads (a paged kernel's raw API)."""
    return [_kernel(backend, seqs, **kw)] + [_kernel(backend, seqs, cache=c, **kw) for c in _caches(backend) if c]


def _decoder(backend: Backend, seqs, **kw) -> list[Case]:
    return [Case(sequences=tuple(SequenceSpec(query_len=q, context_len=c) for q, c in seqs), cache=cache,
                 **_base(backend, **kw)) for cache in _caches(backend)]


def _alignment(b: Backend) -> list[Case]:
    out = [_kernel(b, [(2, 4)], causal=True, causal_alignment=a) for a in sorted(b.caps.causal_alignments,
                                                                                    key=lambda a: a.value)]
    return out + _decoder(b, [(2, 2)])


PROBES: tuple[Probe, ...] = (
    Probe("causal_alignment", "causal mask aligned as declared (bottom-right / top-left)", _alignment),
    Probe("window_left", "left window bound counts keys back from the query, its own included",
          lambda b: [_kernel(b, [(4, 4)], window=(1, 0))] + _decoder(b, [(3, 3)], sliding_window=2)),
    Probe("window_right", "right window bound counts keys ahead of the query",
          lambda b: [_kernel(b, [(4, 4)], window=(0, 1)),
                     Case(sequences=(SequenceSpec(4),), attn_type=AttentionType.ENCODER_ONLY,
                          sliding_window=2, **_base(b))]),
    Probe("window_unbounded", "an unbounded window side (None / -1) is unbounded",
          lambda b: _kernels(b, [(3, 5)], window=(None, 0)) + _kernels(b, [(3, 5)], window=(0, None)),
          spelled=UNBOUNDED_WINDOW),
    Probe("empty_row", "a row with no visible key: output 0 and the declared empty-row LSE",
          lambda b: [_kernel(b, [(3, 1)], causal=True),
                     *[Case(sequences=(SequenceSpec(2, encoder_len=0), SequenceSpec(1, encoder_len=3)),
                            attn_type=AttentionType.ENCODER_DECODER, cache=cache, **_base(b))
                       for cache in _caches(b)]]),
    Probe("lse_base", "LSE returned in the declared base (one key: LSE equals its logit)",
          lambda b: [_kernel(b, [(1, 1)])] + _decoder(b, [(1, 0)])),
    Probe("soft_cap_before_mask", "soft-cap applied to the scaled logits",
          lambda b: [_kernel(b, [(3, 3)], causal=True, soft_cap=1.0)] + _decoder(b, [(3, 2)], soft_cap=1.0)),
    Probe("default_scale", "scale=None means head_size ** -0.5",
          lambda b: [_kernel(b, [(2, 5)])] + _decoder(b, [(2, 3)])),
    Probe("sink", "a sink logit joins the softmax denominator and carries no value",
          lambda b: [_kernel(b, [(1, 1)], sinks=(0.0, 0.0))] + _decoder(b, [(1, 0)], sinks=(0.0, 0.0))),
)


def run_probes(backend: Backend, device: str | None = None) -> list[dict]:
    """One row per probe: the first variant the backend declares, judged like any case.

    verdict `convention` marks a probe whose answer contradicts the declaration; `crash` / `unsupported`
    a probe the kernel could not run; `not_applicable` a probe no variant of which is declared.
    """
    rows = []
    for probe in PROBES:
        case = next((c for c in probe.variants(backend) if not backend.not_supported_reasons(c)), None)
        if case is None:
            rows.append(dict(backend=backend.name, probe=probe.name, question=probe.question, verdict="not_applicable"))
            continue
        for name, spelled in spelled_variants(backend, probe, case):
            row = evaluate(backend, spelled, device=device, check_blind=False).row
            verdict = {"pass": "pass", "blind": "pass", "mismatch": "convention", "nan": "convention",
                       "contract": "convention"}.get(row["verdict"], row["verdict"])  # crash / unsupported stay
            rows.append(dict(backend=backend.name, probe=name, question=probe.question, verdict=verdict,
                             detail=row.get("message", ""), kernel_verdict=row["verdict"], case=spelled.to_json()))
    return rows
