"""Run ON THE DEVICE (vLLM staged, /tmp/vdeps on PYTHONPATH for vllm-backend-*): what a backend's slow kernel calls
wait for. vllm-triton-unified's untold campaign on an H200 had 35 % of its calls take 0.6-2.0 s past their module's
first call, flat over time, features and workers (campaigns/jit-untold-cold-first-builds-h200-2026-11-29.md). Draws N
cases (derandomized), evaluates each as a campaign worker does, then calls the kernel REPEATS more times on the same
inputs, and prints per case the evaluation's kernel seconds, the repeats' seconds and the files Triton's cache gained
during the evaluation (a build writes its kernel there; a load from it or an in-process hit writes nothing):

- slow, new cache files, fast repeats: a build of a specialisation the case's declared fields do not name;
- slow, no new files, fast repeats: a load, or a one-off wait (another process's work on the shared GPU);
- slow repeats too: the call itself is slow (its launcher's host side, an allocation, a synchronisation).

One process alone on the GPU: slow calls a campaign of 16 workers has and this probe does not point at the shared
GPU's waits.

    python tools/probe-slow-calls.py [--backend vllm-triton-unified] [--examples 60] [--repeats 2] [--device cuda]

`--device cpu --backend torch-sdpa-math` runs the same loop without a GPU (no Triton cache: 0 files).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402
from reference.inputs import materialize  # noqa: E402

SLOW_S = 0.5  # benchmarks/jit_campaign.py's SLOW_CALL_S


def cache_files() -> int:
    """Files under Triton's cache folder (TRITON_CACHE_DIR, else ~/.triton/cache)."""
    root = Path(os.environ.get("TRITON_CACHE_DIR", Path.home() / ".triton" / "cache"))
    return sum(len(files) for _, _, files in os.walk(root)) if root.exists() else 0


def timed_call(backend, inputs, device: str) -> float:
    import torch

    started = time.perf_counter()
    backend.run(inputs)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def shape(case) -> str:
    c = case.cache
    blocks = "-" if c is None else f"{c.block_size}x{c.table.value}"
    return (f"{case.dtype.value} h{case.head_size} {case.num_heads}/{case.num_kv_heads} seqs {len(case.sequences)} "
            f"max_q {case.max_query_len} max_kv {case.max_kv_len} blocks {blocks} "
            f"features {','.join(sorted(case.features()))}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="vllm-triton-unified")
    ap.add_argument("--examples", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    backend = get(a.backend)
    kinds = {"build": 0, "slow, no build": 0, "slow repeats": 0, "fast": 0}
    for i, case in enumerate(sample_cases(backend.caps, Limits(), a.examples)):
        before = cache_files()
        row = evaluate(backend, case, device=a.device).row
        built = cache_files() - before
        kernel = row.get("kernel_s") or 0.0
        repeats = []
        if row.get("verdict") not in ("crash", "unsupported", "timeout"):
            inputs = materialize(case, a.device)
            repeats = [timed_call(backend, inputs, a.device) for _ in range(a.repeats)]
        if repeats and min(repeats) > SLOW_S:
            kind = "slow repeats"
        elif kernel > SLOW_S:
            kind = "build" if built else "slow, no build"
        else:
            kind = "fast"
        kinds[kind] += 1
        print(f"{i:3d} kernel {kernel:7.3f} s repeats {' '.join(f'{t:.4f}' for t in repeats) or '-'} "
              f"cache +{built} {kind:14} {row.get('verdict', '?'):11} {shape(case)}", flush=True)
    print(", ".join(f"{k}: {n}" for k, n in kinds.items()), flush=True)


if __name__ == "__main__":
    main()
