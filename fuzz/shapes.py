"""A focused shard's pinned shape: the case fields a JIT compiles a kernel per value of, beyond its compile key.

vLLM's Triton kernel `kernel_unified_attention` takes as `tl.constexpr` the query head count, the GQA ratio, the block
size and the sliding window's value (besides the dtypes and head size of its compile key), so a case of a new shape
is a new Triton build even within a built key: in a 10-minute untold campaign on an H200, 4,213 of vLLM Triton's
9,680 rows took over 0.5 s past a first call, 3,826 distinct shapes, 61 % of worker time
(benchmarks/results/campaigns/jit-untold-side-by-side-h200-2026-11-26.md). A backend names such fields
(`Backend.jit_shape_per`); each focused shard of it then draws one value of each, chosen from the declaration by the
shard's seed, so a shard's cases reuse a few builds, and the campaign's shards together still cover the shapes.
Measured in the same setting with pins (jit-untold-side-by-side-h200-2026-11-27.md): such slow calls fell to 28-34 %
of vLLM Triton's rows (the kernel specializes on more than these fields) and to 0.3-0.8 % of FA4's (1.4 % before).
"""
from __future__ import annotations

import random
from dataclasses import replace

from backends.base import ENCODING_PIN, JIT_SHAPE_FIELDS, Capabilities

from .strategies import SOFT_CAPS, TILE_EDGES, Limits, focus_values, focused_spellings, head_pairs

# A pinned window's value (vLLM's sliding_window W): the smallest ones, and the tile edges where kernels cut keys
# (the drawn lengths put sequence ends at and around them too: fuzz.sizes)
PINNED_WINDOWS = (1, 2, 3, 8, 16, 17, *TILE_EDGES, 1024, 4096)


def pin_shape(caps: Capabilities, limits: Limits, per: tuple[str, ...], seed: int) -> Limits:
    """`limits` with each field of `per` (backends.base.JIT_SHAPE_FIELDS) fixed to one value, the same for the same
    seed: heads to one (num_heads, num_kv_heads) pair, block_sizes to one declared block size, windows to one W of
    PINNED_WINDOWS, soft_caps to one cap of the drawn ones, attn_types to one type, kv_layouts to one declared
    layout, encodings to one declared value of each encoding ("encodings.NAME": of encoding NAME alone). Values the
    limits already narrow are chosen among those."""
    unknown = {f for f in per if f not in JIT_SHAPE_FIELDS and not f.startswith(ENCODING_PIN)}
    if unknown:
        raise ValueError(f"jit_shape_per: {sorted(unknown)} not among {JIT_SHAPE_FIELDS} or {ENCODING_PIN}NAME")
    declared = [name for name, _ in caps.encodings]
    pinned = _encoding_names(per, declared)
    undeclared = sorted(set(pinned) - set(declared))
    if undeclared:
        raise ValueError(f"jit_shape_per: encodings {undeclared} not among the declared ones {declared}")
    rng = random.Random(seed)
    fields: dict[str, tuple] = {}
    if "heads" in per:
        pairs = head_pairs(caps, limits.max_kv_heads)  # in heads()' order (focus_values would sort them)
        fields["heads"] = (rng.choice([p for p in pairs if limits.heads is None or p in limits.heads] or pairs),)
    if "block_sizes" in per and caps.block_sizes:
        fields["block_sizes"] = (rng.choice(focus_values(caps.block_sizes, limits.block_sizes)),)
    if "windows" in per:
        fields["windows"] = (rng.choice(limits.windows or PINNED_WINDOWS),)
    if "soft_caps" in per:
        fields["soft_caps"] = (rng.choice(limits.soft_caps or SOFT_CAPS),)
    if "attn_types" in per:
        types = [t.value for t in focus_values(caps.attn_types, limits.attn_types, key=lambda t: t.value)]
        fields["attn_types"] = (rng.choice(types),)
    if "kv_layouts" in per and caps.kv_layouts:
        layouts = [x.value for x in focus_values(caps.kv_layouts, limits.kv_layouts, key=lambda x: x.value)]
        fields["kv_layouts"] = (rng.choice(layouts),)
    if pinned:  # the focus's other encodings kept as they are
        fields["encodings"] = tuple(e for e in limits.encodings or () if e[0] not in pinned) + tuple(
            (name, str(rng.choice(focused_spellings(name, values, limits.encodings))))
            for name, values in caps.encodings if name in pinned)
    return replace(limits, **fields)


def _encoding_names(per: tuple[str, ...], declared: list[str]) -> tuple[str, ...]:
    """The encodings `per` pins: every declared one for "encodings", NAME for each "encodings.NAME"."""
    if "encodings" in per:
        return tuple(declared)
    return tuple(f[len(ENCODING_PIN):] for f in per if f.startswith(ENCODING_PIN))


def pins_text(limits: Limits, per: tuple[str, ...]) -> str:
    """The pinned fields of `limits` as a short text for rows and logs, e.g. 'heads=8/2 block=16 window=65'."""
    parts = []
    if "heads" in per and limits.heads:
        parts.append("heads=" + ",".join(f"{q}/{kv}" for q, kv in limits.heads))
    if "block_sizes" in per and limits.block_sizes:
        parts.append("block=" + ",".join(map(str, limits.block_sizes)))
    if "windows" in per and limits.windows:
        parts.append("window=" + ",".join(map(str, limits.windows)))
    if "soft_caps" in per and limits.soft_caps:
        parts.append("soft_cap=" + ",".join(f"{c:g}" for c in limits.soft_caps))
    if "attn_types" in per and limits.attn_types:
        parts.append("type=" + ",".join(limits.attn_types))
    if "kv_layouts" in per and limits.kv_layouts:
        parts.append("layout=" + ",".join(limits.kv_layouts))
    names = _encoding_names(per, [name for name, _ in limits.encodings or ()])
    if names:
        parts.append(" ".join(f"{name}={value}" for name, value in limits.encodings if name in names))
    return " ".join(parts)
