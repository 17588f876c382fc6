"""vLLM 0.26.0: `_custom_ops.hadacore_transform` (the Hadamard rotation of the int4 per-token-head cache writer)
gives wrong, run-to-run different rows at small row counts. For each head size and row count, random bf16 rows
are transformed twice and compared with H x in float64 (H the Sylvester matrix): rows whose error exceeds bf16
rounding, or that differ between the two runs, are printed.

Run on a CUDA machine with vllm 0.26.0: exits 1 while such rows exist, 0 once the transform is exact.
"""
import sys

import torch
from vllm import _custom_ops as ops

torch.manual_seed(0)
bad_total = 0
for d in (32, 64, 128, 256):
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = h.cuda()
    for rows in list(range(1, 65)) + [100, 127, 129, 255, 257, 1000, 8193]:
        x = torch.randn(rows, d, device="cuda").to(torch.bfloat16)
        exact = (x.double() @ h) / d**0.5
        runs = [ops.hadacore_transform(x.clone(), inplace=True).double() for _ in range(2)]
        err = (runs[0] - exact).abs().amax(-1)
        wrong = (err > 0.05 * exact.abs().amax(-1)).nonzero().flatten().tolist()
        flaky = (runs[0] != runs[1]).any(-1).nonzero().flatten().tolist()
        if wrong or flaky:
            bad_total += 1
            print(f"d={d} rows={rows} rows%8={rows % 8}: wrong rows {wrong[:8]}{'...' if len(wrong) > 8 else ''} "
                  f"(max err {float(err.max()):.3g}), run-to-run differing rows {flaky[:8]}")
print(f"{bad_total} (d, rows) combinations with wrong or nondeterministic rows")
sys.exit(1 if bad_total else 0)
