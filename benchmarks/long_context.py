"""The oracle on a 128k-token decode context: time and peak memory (chunked over keys and queries).

Usage: python benchmarks/long_context.py [--context 131072] [--heads 8] [--kv-heads 1] [--head-size 128]
The oracle evaluates keys 4096 at a time and queries in chunks of at most 2**22 scores, merging by
LSE (tests/reference: chunked == one block), so memory is bounded by the cache, not the score matrix.
"""
from __future__ import annotations

import argparse
import resource
import time

import reference as r
from reference.attention import attention


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=131072)
    ap.add_argument("--queries", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-size", type=int, default=128)
    a = ap.parse_args()
    case = r.Case(sequences=(r.SequenceSpec(a.queries, a.context),), num_heads=a.heads, num_kv_heads=a.kv_heads,
                  head_size=a.head_size, dtype=r.DType.BFLOAT16,
                  cache=r.CacheSpec(block_size=16, table=r.BlockTableKind.SHUFFLED))
    t0 = time.perf_counter()
    inputs = r.materialize(case)
    t1 = time.perf_counter()
    expected = attention(inputs)
    t2 = time.perf_counter()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| context | queries | heads (kv) | head_size | materialize s | oracle s | peak RSS MiB | finite |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {a.context} | {a.queries} | {a.heads} ({a.kv_heads}) | {a.head_size} | {t1 - t0:.1f} | {t2 - t1:.1f} | "
          f"{peak_mib:.0f} | {bool(expected.output.isfinite().all())} |")


if __name__ == "__main__":
    main()
