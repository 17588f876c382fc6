"""A focused shard of a backend that builds per shape (Backend.jit_shape_per: vLLM's Triton kernels) draws one shape:
fuzz.shapes pins the head counts, block size and window from the shard's seed, within the declaration, and the cases
drawn under the pins keep them (and their compile key), while draws without pins are those of before."""
from __future__ import annotations

import json

import pytest

from backends.base import JIT_SHAPE_FIELDS
from backends.registry import get
from backends.spellings import sliding_window
from campaign.compiles import key_text
from campaign.declarations import compile_keys
from fuzz.shapes import PINNED_WINDOWS, pin_shape, pins_text
from fuzz.strategies import SOFT_CAPS, Limits, LimitsError, cases, compile_key, head_pairs, key_limits, limits_from_json
from tests.fuzz.drawing import derandomized, drawn as _draw


def test_pins_are_declared_values_fixed_by_the_seed_and_vary_across_seeds():
    caps = get("vllm-triton-unified").caps
    pins = [pin_shape(caps, Limits(), JIT_SHAPE_FIELDS, seed) for seed in range(60)]
    assert pins[7] == pin_shape(caps, Limits(), JIT_SHAPE_FIELDS, 7)
    assert all(len(p.heads) == len(p.block_sizes) == len(p.windows) == 1 for p in pins)
    assert {p.heads[0] for p in pins} <= set(head_pairs(caps, Limits().max_kv_heads))
    assert {p.block_sizes[0] for p in pins} <= set(caps.block_sizes)
    assert {p.windows[0] for p in pins} <= set(PINNED_WINDOWS)
    assert min(len({p.heads for p in pins}), len({p.block_sizes for p in pins}), len({p.windows for p in pins})) >= 3
    assert {p.soft_caps[0] for p in pins} <= set(SOFT_CAPS) and {p.attn_types for p in pins} > {("decoder",)}
    assert len({p.kv_layouts for p in pins}) == len(caps.kv_layouts) and {p.kv_layouts[0] for p in pins} <= {
        x.value for x in caps.kv_layouts}
    assert {dict(p.encodings)["path"] for p in pins} == {"2d", "3d"} and all(len(p.encodings) == 2 for p in pins)
    assert pins_text(pins[7], JIT_SHAPE_FIELDS).count("=") == len(JIT_SHAPE_FIELDS) - 1 + len(caps.encodings)
    narrowed = pin_shape(caps, Limits(block_sizes=(32, 64)), ("block_sizes",), 3)  # a focus is kept
    assert narrowed.block_sizes[0] in (32, 64) and narrowed.heads is None
    with pytest.raises(ValueError, match="jit_shape_per"):
        pin_shape(caps, Limits(), ("strides",), 0)


@pytest.mark.parametrize("name", ["vllm-triton-unified", "vllm-backend-triton", "fa4-paged"])
def test_a_pinned_shard_s_cases_have_its_shape_and_its_key(name):
    backend = get(name)
    per, keyed = backend.compiled_per, backend.compiled_features
    keys = [k for k in compile_keys(backend) if '"soft_cap"' in k and ('"window"' in k or name == "fa4-paged")]
    for i, key in enumerate(keys[:: len(keys) // 4][:4]):
        limits = pin_shape(backend.caps, key_limits(backend.caps, Limits(), per, keyed, json.loads(key)),
                           backend.jit_shape_per, seed=i)
        drawn = _draw(cases(backend.caps, limits), 30)
        # a kernel-level window pair may draw both sides unbounded, which is no window: the key's other cases
        assert sum(key_text(compile_key(c, per, keyed)) == key for c in drawn) >= 0.5 * len(drawn), key
        assert {(c.num_heads, c.num_kv_heads) for c in drawn} == set(limits.heads)
        assert {c.cache.block_size for c in drawn} == set(limits.block_sizes)
        assert {c.soft_cap for c in drawn} == set(limits.soft_caps or {c.soft_cap for c in drawn} - {None})
        if "windows" in per:
            windows = {c.sliding_window for c in drawn} | {side for c in drawn if c.window for side in c.window}
            assert windows - {None} == set(limits.windows), (limits.windows, windows)
        if "attn_types" in per:
            assert {c.attn_type.value for c in drawn} == set(limits.attn_types)
        if "kv_layouts" in per:
            assert {c.cache.layout.value for c in drawn} == set(limits.kv_layouts)
        if "encodings" in per:
            assert {c.encoding("path", "") for c in drawn} == {dict(limits.encodings)["path"]}


def test_unpinned_draws_spread_over_shapes():
    """The pins' fields are what varies without them (else pinning would cost no breadth and prove nothing)."""
    caps = get("vllm-triton-unified").caps
    drawn = derandomized(caps, Limits(), 100)
    assert len({(c.num_heads, c.num_kv_heads) for c in drawn}) >= 5
    assert len({c.cache.block_size for c in drawn if c.cache}) >= 3
    assert len({c.sliding_window for c in drawn if c.sliding_window} | {c.window for c in drawn if c.window}) >= 5


def test_shape_limits_are_checked_like_the_other_limits():
    assert limits_from_json('{"heads": [[8, 2]], "block_sizes": [16], "windows": [65], "soft_caps": [30], '
                            '"kv_layouts": ["vllm_hnd"], "encodings": [["path", "3d"]]}') == Limits(
        heads=((8, 2),), block_sizes=(16,), windows=(65,), soft_caps=(30.0,), kv_layouts=("vllm_hnd",),
        encodings=(("path", "3d"),))
    for bad, field in (('{"heads": [[8, 3]]}', "heads"), ('{"heads": [8]}', "heads"), ('{"windows": [0]}', "windows"),
                       ('{"block_sizes": [true]}', "block_sizes"), ('{"soft_caps": [0]}', "soft_caps"),
                       ('{"kv_layouts": ["nhd"]}', "kv_layouts"), ('{"encodings": [["path"]]}', "encodings")):
        with pytest.raises(LimitsError, match=field):
            limits_from_json(bad)
    # the workers rebuild Limits from the JSON's lists: hashable, its pairs equal to drawn ones
    rebuilt = Limits(**json.loads('{"heads": [[8, 2]], "dtypes": ["float16"]}'))
    assert rebuilt.heads == ((8, 2),) and rebuilt.dtypes == ("float16",) and hash(rebuilt)


def test_an_encoding_pin_fixes_that_encoding_alone():
    """"encodings.NAME" pins one declared encoding; the others are drawn as without pins, a focus's kept."""
    caps = get("vllm-triton-unified").caps
    focus = Limits(encodings=(("unbounded_window", "edge"),))
    pins = [pin_shape(caps, focus, ("encodings.path",), s) for s in range(20)]
    assert {dict(p.encodings)["path"] for p in pins} == {"2d", "3d"}
    assert all(len(p.encodings) == 2 and dict(p.encodings)["unbounded_window"] == "edge" for p in pins)
    assert pins_text(pins[0], ("encodings.path",)) == f"path={dict(pins[0].encodings)['path']}"
    with pytest.raises(ValueError, match=r"encodings \['num_splits'\] not among the declared"):
        pin_shape(caps, Limits(), ("encodings.num_splits",), 0)


def test_a_flashinfer_focused_shard_of_a_windowless_key_needs_one_module():
    """FlashInfer's module of a windowless case follows the spelling of its unbounded window (use_swa): a shard pinned
    to one spelling draws the cases of one module, while its other encodings still vary."""
    backend = get("flashinfer-prefill-fa2")
    per, keyed = backend.compiled_per, backend.compiled_features
    key = next(k for k in compile_keys(backend) if '"window"' not in k and '"alibi"' not in k)
    variants, spelled = set(), set()
    for seed in range(6):
        limits = pin_shape(backend.caps, key_limits(backend.caps, Limits(), per, keyed, json.loads(key)),
                           backend.jit_shape_per, seed)
        drawn = [c for c in _draw(cases(backend.caps, limits), 20) if key_text(compile_key(c, per, keyed)) == key]
        assert len({backend.jit_variant(c) for c in drawn}) == 1, (key, limits.encodings)
        variants |= {backend.jit_variant(c) for c in drawn}
        spelled |= {c.encoding("scale", "") for c in drawn}
    assert len(variants) == 2 and spelled == {"passed", "omitted"}


@pytest.mark.parametrize("name", ["vllm-backend-flashinfer", "vllm-layer-flashinfer"])
def test_vllm_s_flashinfer_shards_draw_one_spelling_of_an_unbounded_window(name):
    """vLLM's FLASHINFER plans the windowed modules for a window spelled as a number past the keys, the others for
    None: a focused shard of a windowless key draws one of the two (where the declaration spells both)."""
    backend = get(name)
    per, keyed = backend.compiled_per, backend.compiled_features
    key = next(k for k in compile_keys(backend) if '"window"' not in k)
    windowed = set()
    for seed in range(8):
        limits = pin_shape(backend.caps, key_limits(backend.caps, Limits(), per, keyed, json.loads(key)),
                           backend.jit_shape_per, seed)
        drawn = [c for c in _draw(cases(backend.caps, limits), 12) if key_text(compile_key(c, per, keyed)) == key]
        assert len({sliding_window(c) is None for c in drawn}) == 1, limits.encodings
        windowed |= {sliding_window(c) is None for c in drawn}
    assert windowed == {True, False}
