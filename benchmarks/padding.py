"""The packed oracle's operand padding: a copy a part and pass, or one pad in the parts' own dtype that both passes widen.

Usage: python benchmarks/padding.py [--repeat 5]

For each shape (the parts' token counts, heads, head size, 16-bit dtype) it times, on one CPU thread, what the float64
pass and the 16-bit baseline pass of a packed case cost to get their padded [B, H, L, D] operand:
- per pass: `reference.packed._heads_first` twice, one copy a part converting as it goes;
- once: `reference.packed.padded_once` (`pad_sequence` and one transposing copy), then `widen` for each pass (the
  16-bit pass reads the padded tensor itself).
Both give the same bits (asserted here, and tested in tests/reference/test_packed.py). Prints microseconds and the
ratio once / per pass, best of `--repeat`.
"""
from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from reference import packed  # noqa: E402
from reference.widening import widen  # noqa: E402

SHAPES = (((3, 7, 20), 8, 64), ((1, 1), 4, 128), ((30, 64, 12, 50), 8, 128), ((340, 200), 8, 128),
          ((513, 100, 400), 8, 128), ((2049,), 8, 64))


def per_pass(parts: list[torch.Tensor], length: int) -> list[torch.Tensor]:
    return [packed._heads_first(parts, None, length, dtype) for dtype in (torch.float64, parts[0].dtype)]


def once(parts: list[torch.Tensor], length: int) -> list[torch.Tensor]:
    src = torch.nn.utils.rnn.pad_sequence(parts, batch_first=True).transpose(1, 2).contiguous()  # padded_once's host pad
    return [widen(src, torch.float64), src]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    print("| dtype | part tokens | heads x dim | per pass (us) | once (us) | once / per pass |\n|---|---|---|---|---|---|")
    with torch.inference_mode():
        for dtype in (torch.bfloat16, torch.float16):
            for lens, heads, dim in SHAPES:
                parts = [torch.randn(n, heads, dim).to(dtype) for n in lens]
                length = max(lens)
                assert all(torch.equal(x, y) for x, y in zip(per_pass(parts, length), once(parts, length)))
                number = max(20, int(20000 / (sum(lens) * heads * dim / 1000 + 10)))
                a_us, b_us = (min(timeit.repeat(lambda: f(parts, length), number=number, repeat=a.repeat)) / number * 1e6
                              for f in (per_pass, once))
                print(f"| {str(dtype).removeprefix('torch.')} | {', '.join(map(str, lens))} | {heads} x {dim} | "
                      f"{a_us:.1f} | {b_us:.1f} | {b_us / a_us:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
