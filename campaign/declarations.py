"""What each backend of a campaign declares, per coverage dimension, written to OUT/declarations.json
at the campaign's start; the report's coverage map (reports/coverage.py) holds the draws against it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from backends.base import Feature
from fuzz.sizes import TIERS
from fuzz.strategies import Limits, compile_slices, declared_compile_keys, focus_values
from reference.case import AttentionType, CausalAlignment, ValueDistribution

from .compiles import key_text

if TYPE_CHECKING:
    from .config import CampaignConfig

# Features only a kernel-level (raw API) case can have: a backend without that attention type never draws them.
KERNEL_ONLY = frozenset({"paged_kernel", "top_left", "more_queries_than_keys"})


def declarations(backend, caps=None) -> dict[str, list[str]]:
    """What a backend declares, per coverage dimension (written by the campaign, read by the report); `caps`: a
    declaration other than the backend's here (its documented one)."""
    c = backend.caps if caps is None else caps
    features = {f.value for f in c.features}
    if c.kv_layouts:
        features |= {"paged"} | {f"kv_{k.value}" for k in c.kv_cache_dtypes if k.value != "auto"}
    if CausalAlignment.TOP_LEFT in c.causal_alignments and AttentionType.KERNEL in c.attn_types:
        features.add("top_left")
    if not c.kv_layouts:
        features.discard("paged_kernel")
    if AttentionType.KERNEL not in c.attn_types:
        features -= KERNEL_ONLY
    features = sorted(features)
    return {
        "feature": features,
        "encoding": sorted(f"{name}={v}" for name, values in c.encodings for v in values),
        "size_tier": list(TIERS),
        "value_class": sorted(v.value for v in ValueDistribution),  # EDGE too: drawn at large logit scales
        "attn_type": sorted(t.value for t in c.attn_types),
        "dtype": sorted(d.value for d in c.dtypes),
        "kv_cache_dtype": sorted(k.value for k in c.kv_cache_dtypes) if c.kv_layouts else ["auto"],
        "layout": sorted(x.value for x in c.kv_layouts) or ["contiguous"],
    }


def focused_out(declared: dict[str, list[str]], limits: Limits) -> dict[str, list[str]]:
    """Declared values that a campaign's --limits focus leaves out (the map shows them apart, not as blind
    spots): the strategies' own focus rule (a focus that keeps none of a dimension's values keeps them all)."""
    wanted = {"dtype": limits.dtypes, "kv_cache_dtype": limits.kv_cache_dtypes, "attn_type": limits.attn_types,
              "size_tier": limits.tiers}
    out: dict[str, list[str]] = {}
    for dim, focus in wanted.items():
        kept = focus_values(declared.get(dim, []), focus)
        out[dim] = [v for v in declared.get(dim, []) if v not in kept]
    features = {f"kv_{k}" for k in out.get("kv_cache_dtype", [])}
    if "kernel" in out.get("attn_type", []):
        features |= KERNEL_ONLY
    if limits.features is not None:
        features |= {f.value for f in Feature} - set(limits.features)
    out["feature"] = sorted(features & set(declared.get("feature", [])))
    return {dim: values for dim, values in out.items() if values}


def compile_keys(backend, limits: Limits = Limits()) -> list[str]:
    """A JIT backend's declared compile keys (the rows' `compile_key` text) within `limits`; [] for an AOT one."""
    return [key_text(k) for k in declared_compile_keys(backend.caps, limits, backend.compiled_per,
                                                       backend.compiled_features)]


def write_declarations(out: Path, backends: list, limits: Limits = Limits()) -> None:
    """OUT/declarations.json: {backend: {dimension: values, "_focused_out": {dimension: values}}}; a JIT backend's
    compile keys are a dimension too, so the map shows the keys a campaign never drew."""
    path = Path(out) / "declarations.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    for b in backends:
        declared = declarations(b)
        focused = focused_out(declared, limits)
        # values the library documents that this device refuses: declared, outside the campaign's reach (not blind
        # spots), with the reason
        documented = declarations(b, b.documented_caps) if b.documented_caps is not b.caps else declared
        device_out = {dim: [v for v in values if v not in declared.get(dim, [])] for dim, values in documented.items()}
        device_out = {dim: values for dim, values in device_out.items() if values}
        if device_out:
            declared = documented
            focused = {dim: sorted(set(focused.get(dim, [])) | set(device_out.get(dim, [])))
                       for dim in set(focused) | set(device_out)}
            declared["_device_out"] = {"values": device_out, "why": b.device_out_reason}
        keys = compile_keys(b)
        if keys:
            declared["compile_key"] = keys
            kept = set(compile_keys(b, limits))
            if kept != set(keys):
                focused["compile_key"] = [k for k in keys if k not in kept]
        known[b.name] = declared | {"_focused_out": focused}
    path.write_text(json.dumps(known, indent=1))


# --- a campaign's declarations: the registry is imported in the call (campaign.caches sets the caches first) ---

def campaign_keys(cfg: CampaignConfig) -> dict[str, list[str]]:
    """Each JIT backend's declared compile keys within the campaign's focus (the scheduler's tour shards draw each)."""
    from backends.registry import get

    try:
        return {name: compile_keys(get(name, include_mutants=True, specs=cfg.specs), Limits(**cfg.limits))
                for name in cfg.backends}
    except (KeyError, TypeError, ValueError):
        return {}  # the campaign's own checks report unknown backends and bad limits


def slice_counts(cfg: CampaignConfig) -> dict[str, int]:
    """The number of compile slices of each JIT backend of the campaign (the workers cut them alike)."""
    from backends.registry import get

    out: dict[str, int] = {}
    for name in cfg.backends if cfg.compile_slices else []:
        try:
            backend = get(name, include_mutants=True, specs=cfg.specs)
        except KeyError:
            continue  # the campaign's own checks report unknown backends
        slices = compile_slices(backend.caps, Limits(**cfg.limits), backend.compiled_per, backend.compiled_features)
        out[name] = len(slices)
    return out


def declare(cfg: CampaignConfig) -> None:
    """Write what each backend declares (the report's coverage map compares draws with it)."""
    from backends.registry import get

    try:
        write_declarations(cfg.out, [get(name, include_mutants=True, specs=cfg.specs) for name in cfg.backends],
                           Limits(**cfg.limits))
    except (KeyError, OSError):
        pass  # the campaign's own checks report unknown backends and unwritable directories
