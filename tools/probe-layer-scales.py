"""Run ON THE DEVICE (vLLM staged, /tmp/vdeps on PYTHONPATH): what vLLM's Attention layer does with a dynamic-scale
case (CacheConfig.calculate_kv_scales). Per case: the scales the layer holds after its first forward beside the
oracle's (reference.inputs: amax / 200, 200, 100); for the largest |k|, |v| and |q| element, its exact quotient
x / scale, the oracle's code and the code the layer stored (cache) or handed the impl (query), which sit on an e4m3
tie by construction (fuzz.cache_write.tie_flips); and the verdict with its symptoms.

    python tools/probe-layer-scales.py [--backend vllm-layer-triton] CASE.json [CASE.json ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from reference.case import Case  # noqa: E402


def largest(name: str, raw: torch.Tensor, scale: torch.Tensor, oracle: torch.Tensor, library: torch.Tensor | None):
    """One line: the largest |x| element's quotient and both codes."""
    raw = raw.detach().cpu().double()
    at = tuple(int(i) for i in (raw.abs() == raw.abs().max()).nonzero()[0])
    quotient = float(raw[at] / scale.double().flatten()[0])
    got = "-" if library is None else f"{float(library.detach().cpu().reshape(raw.shape)[at].float()):g}"
    print(f"  {name}: largest at {at}, x / scale = {quotient:.9f}, oracle code "
          f"{float(oracle.cpu().reshape(raw.shape)[at].float()):g}, library code {got}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="vllm-layer-triton")
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    backend = get(args.backend)
    for path in args.cases:
        saved = json.loads(Path(path).read_text())
        case = Case.from_dict(saved.get("case", saved))  # a saved case file, or a bare Case
        ev = evaluate(backend, case, device="cuda")
        row, inputs, actual = ev.row, ev.inputs, ev.actual
        print(f"== {path}: {row['verdict']} {row.get('message', '')[:200]}")
        for s in row.get("symptoms", []):
            print(f"  symptom {s['symptom']}: {s['message'][:200]}")
        if actual is None or inputs.cache is None:
            continue
        written = actual.written_cache
        print("  oracle scales  q %.9g k %.9g v %.9g" % (float(inputs.q_scale[0]) if inputs.q_scale is not None
                                                         else float("nan"), float(inputs.cache.k_scale[0]),
                                                         float(inputs.cache.v_scale[0])))
        if written is not None:
            print("  layer scales     k %.9g v %.9g" % (float(written.k_scale[0]), float(written.v_scale[0])))
        n = case.num_tokens
        largest("k", inputs.key[:n], inputs.cache.k_scale, _new(inputs.cache, inputs, "key"),
                None if written is None else _new(written, inputs, "key"))
        largest("v", inputs.value[:n], inputs.cache.v_scale, _new(inputs.cache, inputs, "value"),
                None if written is None else _new(written, inputs, "value"))
        if inputs.query_fp8 is not None:
            largest("q", inputs.query, inputs.q_scale, inputs.query_fp8, actual.query_fp8)
        torch.cuda.synchronize()


def _new(cache, inputs, which: str) -> torch.Tensor:
    """This step's tokens' codes in `cache`, [N, H_kv, D], read through their slots."""
    n, bs = inputs.case.num_tokens, cache.paged.block_size
    slots = inputs.slot_mapping[:n].cpu().to(torch.int64)
    view = cache.paged.key_view() if which == "key" else cache.paged.value_view()
    return view.cpu()[slots // bs, slots % bs]


if __name__ == "__main__":
    main()
