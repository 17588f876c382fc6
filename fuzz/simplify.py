"""One-field simplifications of a shrunk case, tried after hypothesis' shrink.

Hypothesis shrinks a choice toward its first value, but a KV-cache dtype or layout drawn early changes
every draw after it (scales, granularity, the layouts that fit), so its shrink rarely gets back to
`auto` / the plainest layout: one planted bug (`mutant-soft-cap-ignored`) then saved one minimal case
per cache dtype and layout its first failures happened to carry. Each step here sets one such field to
its simplest declared value; the worker keeps the step when the case still shows the bug's symptom.
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


# Most telling first: a bug that needs none of these fields ends with the plainest cache in at most 5 runs.
STEPS = (_plain_quant, _plain_layout, _no_layers, _contiguous_table, _no_spares)


def simplify(case: Case, caps: Capabilities, still_fails, reasons=None) -> tuple[Case, int]:
    """Apply each step in turn to the case so far, keeping it when `still_fails(case)`; returns the simplest
    case and how many evaluations it took (one per applicable step). `reasons(case)`: why a case is outside
    the declaration (such a step is skipped)."""
    evaluations = 0
    for step in STEPS:
        try:
            candidate = step(case, caps) if case.cache is not None else None
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
