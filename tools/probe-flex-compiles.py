"""Run ON THE DEVICE (vLLM staged, /tmp/vdeps on PYTHONPATH): where a compiled-flex backend's example time goes.
Draws N cases of one backend (derandomized, so two runs draw the same), evaluates each on the GPU in this process
as a campaign worker does, and prints per case the kernel's seconds, the graphs dynamo compiled during it and the
case's shape fields; then the same cases again, warm. Run with TORCH_LOGS=recompiles to see each recompile's guard.

    TORCH_LOGS=recompiles python tools/probe-flex-compiles.py [--backend vllm-layer-flex] [--examples 24]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402


def graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def shape(case) -> str:
    c = case.cache
    blocks = "-" if c is None else f"{c.block_size}x{c.table.value}+{c.spare_blocks}"
    return (f"{case.dtype.value} h{case.head_size} {case.num_heads}/{case.num_kv_heads} tokens {case.num_tokens} "
            f"seqs {len(case.sequences)} blocks {blocks} max_kv {case.max_kv_len} "
            f"features {','.join(sorted(case.features()))}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="vllm-layer-flex")
    ap.add_argument("--examples", type=int, default=24)
    a = ap.parse_args()
    backend = get(a.backend)
    todo = sample_cases(backend.caps, Limits(), a.examples)
    for rnd in ("cold", "warm"):
        total = time.perf_counter()
        for i, case in enumerate(todo):
            before = graphs()
            row = evaluate(backend, case, device="cuda").row
            print(f"{rnd} {i:3d} kernel {row.get('kernel_s', float('nan')):7.3f} s graphs +{graphs() - before} "
                  f"{row['verdict']:11} {shape(case)}", flush=True)
        print(f"{rnd}: {len(todo)} cases in {time.perf_counter() - total:.1f} s", flush=True)


if __name__ == "__main__":
    main()
