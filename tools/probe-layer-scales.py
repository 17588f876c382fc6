"""Run ON THE DEVICE (vLLM staged, /tmp/vdeps on PYTHONPATH): the scales vLLM's Attention layer holds after the
first forward of a dynamic-scale case (CacheConfig.calculate_kv_scales), beside the oracle's (reference.inputs:
amax / 200, 200, 100), the values the layer stored for the case's first token dequantized with them, and the
verdict. Behind the dynamic-scale rows of vllm-layer-triton.

    python tools/probe-layer-scales.py benchmarks/results/cases/vllm-layer-triton-dynamic-scales-one-token.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends import vllm_attention_layer as layer_mod  # noqa: E402
from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402

seen: dict = {}
_forward = layer_mod._UnderTheLayer._forward


def _watching(self, layer, kv_cache, metadata, cfg, inputs):
    flag_before = layer.calculate_kv_scales
    out = _forward(self, layer, kv_cache, metadata, cfg, inputs)
    seen.update(flag_before=flag_before, flag_after=layer.calculate_kv_scales,
                scales={n: float(getattr(layer, f"_{n}_scale").flatten()[0]) for n in ("q", "k", "v")},
                floats={n: getattr(layer, f"_{n}_scale_float", None) for n in ("q", "k", "v")},
                slot=int(inputs.slot_mapping[0]), cache=kv_cache)
    return out


layer_mod._UnderTheLayer._forward = _watching

for path in sys.argv[1:]:
    saved = json.loads(Path(path).read_text())
    case = Case.from_dict(saved.get("case", saved))  # a saved case file, or a bare Case
    backend = get("vllm-layer-triton")
    ev = evaluate(backend, case, device="cuda")
    row = ev.row
    inputs = materialize(case)
    if ev.actual is not None and ev.expected is not None:
        print("value[0, head 0]  ", [round(x, 4) for x in inputs.value[0, 0, :6].float().tolist()])
        print("expected[0, 0]    ", [round(x, 4) for x in ev.expected.output[0, 0, :6].float().tolist()])
        print("actual[0, 0]      ", [round(x, 4) for x in ev.actual.output[0, 0, :6].float().cpu().tolist()])
    print(f"== {path}: {row['verdict']} {row.get('message', '')[:160]}")
    print("oracle scales   q %.6g k %.6g v %.6g" % (float(inputs.q_scale[0]), float(inputs.cache.k_scale[0]),
                                                    float(inputs.cache.v_scale[0])))
    print("layer scales   ", seen.get("scales"), "floats", seen.get("floats"))
    print("calculate_kv_scales before / after forward:", seen.get("flag_before"), seen.get("flag_after"))
    if "cache" in seen:
        bs = case.cache.block_size
        block, off = divmod(seen["slot"], bs)
        print("cache", tuple(seen["cache"].shape), seen["cache"].dtype)
        stored_v = seen["cache"][block, 1, off].float() if seen["cache"].dim() == 5 else None
        if stored_v is not None:
            for name, s in (("layer v scale", seen["scales"]["v"]), ("oracle v scale", float(inputs.cache.v_scale[0]))):
                print(f"stored x {name}", [round(x, 4) for x in (stored_v.flatten()[:6].cpu() * s).tolist()])
    torch.cuda.synchronize()
