"""One-field simplifications of a shrunk case, tried after hypothesis' shrink.

Hypothesis shrinks a choice toward its first value, but a KV-cache dtype or layout drawn early changes
every draw after it (scales, granularity, the layouts that fit), so its shrink rarely gets back to
`auto` / the plainest layout: one planted bug (`mutant-soft-cap-ignored`) then saved one minimal case
per cache dtype and layout its first failures happened to carry. Each step here sets one such field to
its simplest declared value; the worker keeps the step when the case still shows the bug's symptom.
Features drawn early stick the same way (`mutant-window-off-by-one` saved minimal cases with gqa, sinks
or chunked_local beside its window, 5 in a 60-s CPU campaign): the feature steps drop one each.
"""
from __future__ import annotations

from dataclasses import replace

from backends.base import Capabilities
from reference.case import BlockTableKind, Case, KVLayout, Quant

# The plainest layouts first: the flash pair, then FlashInfer's, then vLLM's packed and the older ones.
LAYOUT_ORDER = (KVLayout.FLASH_NHD, KVLayout.FLASH_HND, KVLayout.FLASHINFER_NHD, KVLayout.FLASHINFER_HND)


def simplest_layout(caps: Capabilities) -> KVLayout | None:
    declared = sorted(caps.kv_layouts, key=lambda x: (LAYOUT_ORDER.index(x) if x in LAYOUT_ORDER else 99, x.value))
    return declared[0] if declared else None


def _plain_quant(case: Case, caps: Capabilities) -> Case | None:
    return None if case.cache.quant == Quant() else replace(case, cache=replace(case.cache, quant=Quant()))


def _plain_layout(case: Case, caps: Capabilities) -> Case | None:
    layout = simplest_layout(caps)
    return None if layout in (None, case.cache.layout) else replace(case, cache=replace(case.cache, layout=layout))


def _no_layers(case: Case, caps: Capabilities) -> Case | None:
    return replace(case, cache=replace(case.cache, layers=0, layer=0)) if case.cache.layers else None


def _contiguous_table(case: Case, caps: Capabilities) -> Case | None:
    if case.cache.table in (BlockTableKind.CONTIGUOUS, BlockTableKind.SHARED_PREFIX):
        return None
    return replace(case, cache=replace(case.cache, table=BlockTableKind.CONTIGUOUS))


def _no_spares(case: Case, caps: Capabilities) -> Case | None:
    if not (case.cache.spare_blocks or case.cache.padding_slots):
        return None
    return replace(case, cache=replace(case.cache, spare_blocks=0, padding_slots=0))


def _no_sinks(case: Case, caps: Capabilities) -> Case | None:
    return replace(case, sinks=None) if case.sinks is not None else None


def _no_soft_cap(case: Case, caps: Capabilities) -> Case | None:
    return replace(case, soft_cap=None) if case.soft_cap is not None else None


def _no_alibi(case: Case, caps: Capabilities) -> Case | None:
    return replace(case, alibi=None) if case.alibi is not None else None


def _no_chunks(case: Case, caps: Capabilities) -> Case | None:
    return replace(case, attn_chunk_size=None) if case.attn_chunk_size is not None else None


def _one_head_per_kv_head(case: Case, caps: Capabilities) -> Case | None:
    """GQA / MQA -> as many kv heads as query heads (per-head sinks and slopes keep their count)."""
    return replace(case, num_kv_heads=case.num_heads) if case.num_kv_heads != case.num_heads else None


# Most telling first: a bug that needs none of these fields ends with the plainest cache in at most 5 runs, and
# without the features it does not need in at most 5 more.
CACHE_STEPS = (_plain_quant, _plain_layout, _no_layers, _contiguous_table, _no_spares)
FEATURE_STEPS = (_no_sinks, _no_soft_cap, _no_alibi, _no_chunks, _one_head_per_kv_head)
STEPS = CACHE_STEPS + FEATURE_STEPS


def simplify(case: Case, caps: Capabilities, still_fails, reasons=None) -> tuple[Case, int]:
    """Apply each step in turn to the case so far, keeping it when `still_fails(case)`; returns the simplest
    case and how many evaluations it took (one per applicable step). `reasons(case)`: why a case is outside
    the declaration (such a step is skipped)."""
    evaluations = 0
    for step in STEPS:
        try:
            candidate = step(case, caps) if case.cache is not None or step in FEATURE_STEPS else None
        except ValueError:  # Case validates itself: a combination it refuses is no simpler case
            continue
        if candidate is None:
            continue
        if reasons is not None and reasons(candidate):
            continue
        evaluations += 1
        if still_fails(candidate):
            case = candidate
    return case, evaluations
