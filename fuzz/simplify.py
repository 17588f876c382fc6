"""One-field simplifications of a shrunk case, tried after hypothesis' shrink.

Hypothesis shrinks a choice toward its first value, but a KV-cache dtype or layout drawn early changes
every draw after it (scales, granularity, the layouts that fit), so its shrink rarely gets back to
`auto` / the plainest layout: one planted bug (`mutant-soft-cap-ignored`) then saved one minimal case
per cache dtype and layout its first failures happened to carry. Each step here sets one such field to
its simplest declared value; the worker keeps the step when the case still shows the bug's symptom.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from backends.base import Capabilities
from reference.case import BlockTableKind, Case, KVLayout, Quant

# The plainest layouts first: the flash pair, then FlashInfer's, then vLLM's packed and the older ones.
LAYOUT_ORDER = (KVLayout.FLASH_NHD, KVLayout.FLASH_HND, KVLayout.FLASHINFER_NHD, KVLayout.FLASHINFER_HND)


def simplest_layout(caps: Capabilities) -> KVLayout | None:
    declared = sorted(caps.kv_layouts, key=lambda x: (LAYOUT_ORDER.index(x) if x in LAYOUT_ORDER else 99, x.value))
    return declared[0] if declared else None


def simpler(case: Case, caps: Capabilities) -> Iterator[Case]:
    """Cases one cache field simpler than `case`, most telling first (each may still fall outside `caps`:
    the caller checks the declaration)."""
    cache = case.cache
    if cache is None:
        return
    if cache.quant != Quant():
        yield replace(case, cache=replace(cache, quant=Quant()))
    layout = simplest_layout(caps)
    if layout is not None and cache.layout != layout:
        yield replace(case, cache=replace(cache, layout=layout))
    if cache.layers:
        yield replace(case, cache=replace(cache, layers=0, layer=0))
    if cache.table not in (BlockTableKind.CONTIGUOUS, BlockTableKind.SHARED_PREFIX):
        yield replace(case, cache=replace(cache, table=BlockTableKind.CONTIGUOUS))
    if cache.spare_blocks or cache.padding_slots:
        yield replace(case, cache=replace(cache, spare_blocks=0, padding_slots=0))


def simplify(case: Case, caps: Capabilities, still_fails, reasons=None) -> tuple[Case, int]:
    """Greedily apply each step of `simpler` that keeps `still_fails(case)` true; returns the simplest case
    and how many evaluations it took. `reasons(case)`: why a case is outside the declaration (skipped)."""
    evaluations = 0
    progress = True
    while progress:
        progress = False
        for candidate in simpler(case, caps):
            try:
                candidate = Case.from_json(candidate.to_json())  # validated, as a saved case would be
            except (ValueError, TypeError):
                continue
            if reasons is not None and reasons(candidate):
                continue
            evaluations += 1
            if still_fails(candidate):
                case, progress = candidate, True
                break
    return case, evaluations
