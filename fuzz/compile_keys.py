"""Compile keys: what a JIT backend builds one module for (Backend.compiled_per, compiled_features), the keys its
declaration admits, the Limits that draw one key, and the compile slices of --compile-slices."""
from __future__ import annotations

import itertools
from dataclasses import replace

from backends.base import Capabilities, Feature
from reference.case import AttentionType, Case, DType, KVCacheDType

from .limits import Limits, focus_values


# The Limits focus fields a compile slice fixes: (the declared values, their focus key).
_SLICE_FIELDS = {"dtypes": (lambda c: c.dtypes, lambda d: d.value), "head_sizes": (lambda c: c.head_sizes, int),
                 "kv_cache_dtypes": (lambda c: c.kv_cache_dtypes if c.kv_layouts else (), lambda k: k.value)}


def compile_slices(caps: Capabilities, limits: Limits, per: tuple[str, ...],
                   features: tuple[Feature, ...] = ()) -> list[Limits]:
    """`limits` narrowed to each combination of the focus fields `per` (one value each, within the focus)
    and of the compile-keyed `features` (each allowed or off): a JIT backend's compile slices
    (Backend.compiled_per, Backend.compiled_features). Neither: [limits]. The order is fixed and covering
    first (_covering_first): a campaign that builds only a few modules still draws every declared value."""
    names, axes = [], []
    for name in per:
        declared, key = _SLICE_FIELDS[name]
        values = [key(v) for v in focus_values(declared(caps), getattr(limits, name), key)]
        if values:
            names.append(name)
            axes.append(values)
    drawn = {f for f in caps.features if limits.features is None or f.value in limits.features}
    keyed = sorted((f for f in features if f in drawn), key=lambda f: f.value)
    out: list[tuple[Limits, frozenset]] = []
    for combo in itertools.product(*axes, *([False, True] for _ in keyed)):
        fields = {n: (v,) for n, v in zip(names, combo)}
        if "kv_cache_dtypes" in fields and "dtypes" in fields and \
                not KVCacheDType(fields["kv_cache_dtypes"][0]).holds(DType(fields["dtypes"][0])):
            continue  # a 16-bit cache holds the model's dtype only: nothing to draw
        if "kv_cache_dtypes" in fields and "head_sizes" in fields and \
                not KVCacheDType(fields["kv_cache_dtypes"][0]).holds_heads(fields["head_sizes"][0], fields["head_sizes"][0]):
            continue  # int4's rotation takes powers of two only
        if keyed:
            allowed = {f for f, on in zip(keyed, combo[len(names):]) if on}
            fields["features"] = tuple(sorted(f.value for f in drawn if f not in keyed or f in allowed))
        out.append((replace(limits, **fields), frozenset(zip([*names, *keyed], combo))))
    return _covering_first(out)


def _covering_first(slices: list[tuple[Limits, frozenset]]) -> list[Limits]:
    """Greedy set cover, then the rest in product order: each next slice is the earliest one that adds the
    most (field, value) pairs no slice before it has. In product order the first 16 of flashinfer-prefill-fa3's
    288 slices were all bfloat16 / head 64 / 16-bit cache; covering first, its first 3 draw every value."""
    ordered, seen, rest = [], set(), list(slices)
    while rest:
        best = max(range(len(rest)), key=lambda i: (len(rest[i][1] - seen), -i))
        if not rest[best][1] - seen:
            break
        seen |= rest[best][1]
        ordered.append(rest.pop(best)[0])
    return ordered + [s for s, _ in rest]


def compile_key(case: Case, per: tuple[str, ...], features: tuple[Feature, ...] = ()) -> tuple:
    """What a JIT backend compiles a new kernel for (Backend.compiled_per, compiled_features): the case's
    value of each focus field in `per` and which keyed features it switches on. () for an AOT backend."""
    if not per and not features:
        return ()
    values = {"dtypes": case.dtype.value, "head_sizes": (case.head_size, case.value_size),
              "kv_cache_dtypes": case.kv_cache_dtype.value}
    on = case.features()
    return (*(values[name] for name in per), *(f.value for f in features if f.value in on))


def key_limits(caps: Capabilities, limits: Limits, per: tuple[str, ...], features: tuple[Feature, ...],
               key: list | tuple) -> Limits:
    """`limits` narrowed towards one compile key (`compile_key`'s form, or its JSON list): the `per` fields fixed to
    the key's values (the value head size too), the compile-keyed features the key does not switch on left out,
    those it switches on drawn in every case, and the attention types that take them. Cases drawn within may still
    miss the key (a window side left unbounded, a value size equal to the head size): callers filter on
    `compile_key`."""
    fields: dict[str, tuple] = {}
    for name, value in zip(per, key):
        fields[name] = (int(value[0]),) if name == "head_sizes" else (value,)
        if name == "head_sizes":
            fields["value_sizes"] = (int(value[1]),)
    on = set(key[len(per):])
    keyed = {f.value for f in features}
    drawn = [f.value for f in caps.features if limits.features is None or f.value in limits.features]
    fields["features"] = tuple(sorted(f for f in drawn if f not in keyed or f in on))
    fields["features_on"] = tuple(sorted(on))
    # attention types that take every feature the key switches on (a window is none of cross attention's, ALiBi
    # only where the backend declares it)
    types = set(caps.attn_types) if limits.attn_types is None else {t for t in caps.attn_types
                                                                    if t.value in limits.attn_types}
    if Feature.WINDOW.value in on:
        types.discard(AttentionType.ENCODER_DECODER)
    if Feature.ALIBI.value in on and caps.alibi_attn_types is not None:
        types &= set(caps.alibi_attn_types)
    if types:
        fields["attn_types"] = tuple(sorted(t.value for t in types))
    return replace(limits, **fields)


def declared_compile_keys(caps: Capabilities, limits: Limits, per: tuple[str, ...],
                          features: tuple[Feature, ...] = ()) -> list[tuple]:
    """Every compile key (`compile_key`'s form) the declaration admits within the focus: each declared dtype,
    (head size, value size) pair the strategies draw, kv dtype that holds them, and subset of the compile-keyed
    features. What a campaign should build over its course; the coverage map shows the ones it never drew."""
    if not per and not features:
        return []
    dtypes = [d.value for d in focus_values(caps.dtypes, limits.dtypes, lambda d: d.value)]
    heads = [int(h) for h in focus_values(caps.head_sizes, limits.head_sizes, int)]
    drawn = {f for f in caps.features if limits.features is None or f.value in limits.features}
    if caps.head_size_pairs is not None:
        pairs = [p for p in caps.head_size_pairs if p[0] in heads] or list(caps.head_size_pairs)
    elif Feature.HEAD_SIZE_V in drawn:  # head_size_v: none, or any declared size (where the focus draws it)
        values = [int(v) for v in focus_values(caps.head_sizes, limits.value_sizes, int)]
        pairs = sorted({(h, v) for h in heads for v in (h, *values)})
    else:
        pairs = [(h, h) for h in heads]
    kvds = [k.value for k in focus_values(caps.kv_cache_dtypes, limits.kv_cache_dtypes, lambda k: k.value)] \
        if caps.kv_layouts else ["auto"]
    keyed = [f.value for f in features if f in drawn]
    out = []
    for dtype, (h, v), kvd in itertools.product(dtypes, pairs, kvds):
        kv = KVCacheDType(kvd)
        if not (kv.holds(DType(dtype)) and kv.holds_heads(h, v)):
            continue
        values = {"dtypes": dtype, "head_sizes": (h, v), "kv_cache_dtypes": kvd}
        for on in itertools.product([False, True], repeat=len(keyed)):
            chosen = [f for f, o in zip(keyed, on) if o]
            if Feature.HEAD_SIZE_V.value in keyed and (Feature.HEAD_SIZE_V.value in chosen) != (v != h):
                continue  # head_size_v is on exactly where the pair differs
            out.append((*(values[name] for name in per), *chosen))
    return sorted(set(out), key=repr)
