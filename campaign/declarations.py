"""What each backend of a campaign declares, per coverage dimension, written to OUT/declarations.json
at the campaign's start; the report's coverage map (reports/coverage.py) holds the draws against it."""
from __future__ import annotations

import json
from pathlib import Path

from fuzz.sizes import TIERS
from reference.case import AttentionType, CausalAlignment, ValueDistribution


def declarations(backend) -> dict[str, list[str]]:
    """What a backend declares, per coverage dimension (written by the campaign, read by the report)."""
    c = backend.caps
    features = {f.value for f in c.features}
    if c.kv_layouts:
        features |= {"paged"} | {f"kv_{k.value}" for k in c.kv_cache_dtypes if k.value != "auto"}
    if CausalAlignment.TOP_LEFT in c.causal_alignments and AttentionType.KERNEL in c.attn_types:
        features.add("top_left")
    if not c.kv_layouts or AttentionType.KERNEL not in c.attn_types:
        features.discard("paged_kernel")
    features = sorted(features)
    return {
        "feature": features,
        "encoding": sorted(f"{name}={v}" for name, values in c.encodings for v in values),
        "size_tier": list(TIERS),
        "value_class": sorted(v.value for v in ValueDistribution),
        "attn_type": sorted(t.value for t in c.attn_types),
        "dtype": sorted(d.value for d in c.dtypes),
        "kv_cache_dtype": sorted(k.value for k in c.kv_cache_dtypes) if c.kv_layouts else ["auto"],
        "layout": sorted(x.value for x in c.kv_layouts) or ["contiguous"],
    }


def write_declarations(out: Path, backends: list) -> None:
    path = Path(out) / "declarations.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    known.update({b.name: declarations(b) for b in backends})
    path.write_text(json.dumps(known, indent=1))


