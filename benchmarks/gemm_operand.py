"""The oracle's 16-bit products on this CPU: torch's own GEMM of the dtype against operands widened to float32 and the
result rounded back once (reference.attention.gemm_operand), on the score and value products of drawn cases.

Usage: python benchmarks/gemm_operand.py [--cases-of aten-flash-varlen] [--tiers small] [--examples 200] [--rounds 3]

Draws derandomized cases of a backend's declaration (`fuzz.sampling.sample_cases`), builds each case's padded score
product q [B, H, Q, D] x k [B, H_kv, K, D] and value product p [B, H, Q, K] x v in bfloat16 and float16, and times both
roads on one thread, the rounds alternating; then prints microseconds a case, the ratio, and the share of elements
whose bits agree. Prints the CPU's bfloat16 instructions too: where it has them, the oracle keeps torch's bfloat16 GEMM.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.registry import get  # noqa: E402
from fuzz.sampling import sample_cases  # noqa: E402
from fuzz.strategies import Limits  # noqa: E402
from reference.attention import _cpu_has_bf16_gemm  # noqa: E402


def operands(case, dtype: torch.dtype, gen: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The case's two padded products as (a, b) pairs, kv heads grouped as reference.packed does them."""
    b, h, hkv = len(case.sequences), case.num_heads, case.num_kv_heads
    q_len, k_len, d, dv = case.max_query_len, case.max_kv_len, case.head_size, case.value_size
    q = torch.randn(b, hkv, h // hkv * q_len, d, generator=gen).to(dtype)
    k = torch.randn(b, hkv, k_len, d, generator=gen).to(dtype)
    p = torch.rand(b, hkv, h // hkv * q_len, k_len, generator=gen).to(dtype)
    v = torch.randn(b, hkv, k_len, dv, generator=gen).to(dtype)
    return [(q, k.transpose(-1, -2)), (p, v)]


def own(pairs) -> list[torch.Tensor]:
    return [torch.matmul(a, b) for a, b in pairs]


def widened(pairs) -> list[torch.Tensor]:
    return [torch.matmul(a.float(), b.float()).to(a.dtype) for a, b in pairs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases-of", default="aten-flash-varlen")
    ap.add_argument("--tiers", default="small")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    drawn = sample_cases(get(a.cases_of).caps, Limits(tiers=tuple(a.tiers.split(","))), a.examples)
    print(f"CPU bfloat16 GEMM instructions (AVX512-BF16 / AMX): {_cpu_has_bf16_gemm()}; torch {torch.__version__}; "
          f"{len(drawn)} cases of {a.cases_of}, tiers {a.tiers}\n")
    print("| dtype | own GEMM us a case | widened us a case | widened / own | elements with the same bits |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for dtype in (torch.bfloat16, torch.float16):
            gen = torch.Generator().manual_seed(0)
            pairs = [operands(case, dtype, gen) for case in drawn]
            times: dict[str, list[float]] = {"own": [], "widened": []}
            for _ in range(a.rounds):
                for name, road in (("own", own), ("widened", widened)):
                    started = time.perf_counter()
                    for pair in pairs:
                        road(pair)
                    times[name].append(1e6 * (time.perf_counter() - started) / len(pairs))
            same = total = 0
            for pair in pairs:
                for x, y in zip(own(pair), widened(pair)):
                    same, total = same + int((x == y).sum()), total + x.numel()
            mine, theirs = statistics.median(times["widened"]), statistics.median(times["own"])
            print(f"| {str(dtype).removeprefix('torch.')} | {theirs:.1f} | {mine:.1f} | {mine / theirs:.3f} | "
                  f"{100 * same / max(total, 1):.3f} % |")


if __name__ == "__main__":
    main()
