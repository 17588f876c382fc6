"""What a campaign may draw: Limits (the focus of --limits, the warm-up's tiers) and the declared values they keep."""
from __future__ import annotations

from dataclasses import dataclass, replace

from backends.base import Feature
from reference.case import AttentionType, DType, KVCacheDType, KVLayout

from .sizes import TIERS


@dataclass(frozen=True)
class Limits:
    """Size bounds of drawn cases (keep them small: fuzzing wants many cases, not big ones)."""

    max_sequences: int = 4
    max_context: int = 80  # the small tier's keys (fuzz/sizes.py: tile and long tiers go further)
    max_query: int = 24
    max_kv_heads: int = 4
    max_long_context: int = 16384  # the long tier's largest key count
    tiers: tuple[str, ...] | None = None  # focus: e.g. ("small",) for JIT kernels or quick runs
    # Focus (for JIT-compiled kernels, where every new dtype / head size / kv dtype is a compile):
    # draw only these, intersected with the declaration (an empty intersection keeps the declaration).
    dtypes: tuple[str, ...] | None = None
    head_sizes: tuple[int, ...] | None = None
    value_sizes: tuple[int, ...] | None = None  # where a backend takes a value head size of its own (head_size_v)
    kv_cache_dtypes: tuple[str, ...] | None = None
    attn_types: tuple[str, ...] | None = None  # e.g. ("kernel",): the raw-API region only
    features: tuple[str, ...] | None = None  # draw only these of the declared features (the others stay off)
    # draw these features in every case that admits them (a focused shard of one compile key: no rejected draws)
    features_on: tuple[str, ...] | None = None
    # Shape focus (a JIT that builds per shape, not only per compile key: fuzz.shapes pins one of each per shard):
    heads: tuple[tuple[int, int], ...] | None = None  # (num_heads, num_kv_heads) pairs, within the declaration
    block_sizes: tuple[int, ...] | None = None  # paged caches' block sizes, within the declaration
    windows: tuple[int, ...] | None = None  # vLLM's sliding window W (and a kernel window's bounded sides) when drawn
    soft_caps: tuple[float, ...] | None = None  # the soft-cap values, when one is drawn
    kv_layouts: tuple[str, ...] | None = None  # paged caches' layouts, where the drawn dtype and heads allow them
    encodings: tuple[tuple[str, str], ...] | None = None  # (encoding, value) pairs: those encodings draw these values

    def __post_init__(self) -> None:
        # Limits(**json) gets lists: tuples keep it hashable (fuzz.cached builds one strategy per Limits, an unhashable
        # one builds afresh at every draw) and a [num_heads, num_kv_heads] or [encoding, value] pair equal to the drawn
        for name, value in vars(self).items():
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(tuple(v) if isinstance(v, list) else v for v in value))


def warm_up(limits: Limits) -> Limits:
    """The limits of a campaign's warm-up shard: the small tier only, unless the limits already focus tiers."""
    return limits if limits.tiers is not None else replace(limits, tiers=("small",))


class LimitsError(ValueError):
    """A --limits value outside what Limits takes; the message names the key and what is allowed."""


def limits_from_json(text: str) -> Limits:
    """Limits from the JSON of --limits, every key and value checked (one-line errors)."""
    import json
    from dataclasses import fields

    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise LimitsError(f"--limits: not JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                          f"e.g. '{{\"max_context\": 200}}'") from None
    if not isinstance(data, dict):
        raise LimitsError(f"--limits: a JSON object of Limits fields, got {type(data).__name__}")
    known = {f.name: f for f in fields(Limits)}
    for key, value in data.items():
        if key not in known:
            raise LimitsError(f"--limits: unknown key {key!r}; allowed: {', '.join(sorted(known))}")
        allowed = _LIMIT_VALUES.get(key)
        if allowed is None:  # a size bound
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key.startswith("min") else 1):
                raise LimitsError(f"--limits: {key}={value!r}: an integer >= {0 if key.startswith('min') else 1}")
            continue
        if not isinstance(value, list) or not value:
            raise LimitsError(f"--limits: {key}={value!r}: a non-empty list, e.g. {allowed[:2]}")
        sized = key in ("head_sizes", "value_sizes", "block_sizes", "windows")
        if key == "soft_caps":
            bad = [v for v in value if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0]
            what = "numbers > 0"
            value = value if bad else [float(v) for v in value]
        elif key == "encodings":
            bad = [v for v in value if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v))]
            what = "[encoding, value] pairs of strings (`attnref backends -v` lists each backend's encodings)"
        elif key == "heads":
            bad = [v for v in value if not (isinstance(v, list) and len(v) == 2 and all(_positive(x) for x in v)
                                            and v[0] % v[1] == 0)]
            what = "[num_heads, num_kv_heads] pairs of integers >= 1, num_heads a multiple of num_kv_heads"
        elif sized:
            bad, what = [v for v in value if not _positive(v)], "integers >= 1"
        else:
            bad, what = [v for v in value if v not in allowed], f"values from {allowed}"
        if bad:
            raise LimitsError(f"--limits: {key} has {bad[0]!r}; allowed: {what}")
        data[key] = value  # Limits makes lists (and [a, b] pairs) tuples
    return Limits(**data)


_LIMIT_VALUES = {"dtypes": [d.value for d in DType], "kv_cache_dtypes": [k.value for k in KVCacheDType],
                 "features": sorted(f.value for f in Feature), "features_on": sorted(f.value for f in Feature),
                 "attn_types": [t.value for t in AttentionType], "head_sizes": [], "value_sizes": [],
                 "tiers": list(TIERS), "heads": [], "block_sizes": [], "windows": [], "soft_caps": [],
                 "kv_layouts": [x.value for x in KVLayout], "encodings": []}


def _positive(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def focus_values(declared, wanted, key=lambda x: x):
    """Sorted declared values, narrowed to `wanted` when that leaves any."""
    declared = sorted(declared, key=key)
    if wanted is None:
        return declared
    narrowed = [x for x in declared if key(x) in set(wanted)]
    return narrowed or declared
