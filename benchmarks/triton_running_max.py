"""vLLM's triton_unified_attention (2D prefill path) on a saved case, emulated on the CPU tile by tile as its source
reads (vllm 0.26.0, v1/attention/ops/triton_unified_attention.py and triton_attention_helpers.py), to test one
mechanism: `softmax_step` sets a row's running max M to 0 when a tile is fully masked for it (`m_j > -inf` else 0),
and M starts at -inf with L at 1. A row whose first tile is all masked (a sliding window starts its Q block's tile
range at the block's first query) then keeps M = 0 while its visible scores are negative: its weights are exp(s), not
exp(s - max), and `P.to(V.dtype)` rounds them in the model dtype while L sums them in float32. In float16 they lose
precision below exp(-9.7) (subnormal) and are 0 below about exp(-17.3): the row's output is 0.

    python benchmarks/triton_running_max.py benchmarks/results/cases/vllm-layer-triton-window-one-key-ulp.json \
        [--scale S]
    python benchmarks/triton_running_max.py --rows RESULTS/rows.jsonl

`--rows`: every distinct failing case of a campaign that the emulation writes out (a window and no other mask rule,
no ALiBi or sinks, queries of more than one token: the 2D path), the kernel's recorded value at its worst
element beside the emulation's, with and without the reset.

Prints the emulated kernel's error against the oracle (and, given the case's row, the kernel's recorded value at its
worst element beside the emulation's); `--scale` replaces the case's softmax scale (what a case with more negative
scores would give). Cases with ALiBi, sinks or mask rules are refused: the emulation does not write those out (with
a sink the running max starts at the sink and is never reset).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from reference.attention import attention, query_for_oracle, sequence_kv, sequence_masks  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402


def tile_range(context: int, seq_len: int, query_len: int, t: int, window: int | None, tile: int,
               block_m: int, per_kv: int) -> range:
    """compute_tile_loop_bounds for the Q block holding query t (causal, no mask rules)."""
    block_q = block_m // per_kv
    lo_q = (t // block_q) * block_q
    hi_q = min(lo_q + (block_m - 1) // per_kv, query_len - 1)
    prefix = min(context + lo_q + (block_m - 1) // per_kv + 1, seq_len)
    start, end = 0, -(-prefix // tile)
    if window:
        start = max(0, (context + lo_q - window + 1) // tile)
        end = min((context + hi_q) // tile + 1, end)
    return range(start, end)


def emulate(case: Case, inputs, tile: int = 32, reset: bool = True) -> torch.Tensor:
    """The kernel's output [N, H, D_v] in the case's dtype: float32 scores and accumulators, P rounded to V's dtype for
    P.V (the model dtype; e4m3 with the layer's fp8 query over an fp8 cache, whose V stays fp8), the running max reset
    to 0 after a fully masked tile, L starting at 1 (`reset=False`: a fully masked tile skipped, as a plain online
    softmax leaves it). BLOCK_M as the launcher picks it."""
    dtype, per_kv = case.dtype.torch, case.num_heads // case.num_kv_heads
    block_m = 16 if per_kv <= 16 else 1 << (per_kv - 1).bit_length()
    quant = case.cache.quant if case.cache is not None else None
    p_dtype = torch.float8_e4m3fn if quant is not None and quant.q_fp8_scale is not None else dtype
    query = query_for_oracle(inputs, torch.float32)
    masks, _ = sequence_masks(case, torch.device("cpu"))
    window = case.window_bounds[0] + 1 if case.window_bounds[0] is not None else None
    out = torch.zeros(case.num_tokens, case.num_heads, case.value_size)
    for i, seq in enumerate(case.sequences):
        k, v = sequence_kv(inputs, i, torch.float32)  # fp8 codes x their scale, as the kernel folds them
        seq_len, first = seq.context_len + seq.query_len, case.query_starts[i]
        for t in range(seq.query_len):
            for h in range(case.num_heads):
                m, l, acc = -math.inf, 1.0, torch.zeros(case.value_size)
                for j in tile_range(seq.context_len, seq_len, seq.query_len, t, window, tile, block_m, per_kv):
                    keys = torch.arange(j * tile, min((j + 1) * tile, seq_len))
                    s = case.softmax_scale * (k[keys, h // per_kv] @ query[first + t, h])
                    if case.soft_cap is not None:  # apply_softcap: x * tanh(S / x) through exp of both signs
                        up, down = torch.exp(s / case.soft_cap), torch.exp(-s / case.soft_cap)
                        s = case.soft_cap * (up - down) / (up + down)
                    s = torch.where(masks[i][min(h, masks[i].shape[0] - 1), t, keys], s, -math.inf)
                    m_j = max(m, float(s.max()))
                    if m_j == -math.inf and not reset:
                        continue
                    m_j = m_j if m_j > -math.inf else 0.0
                    p = torch.exp(s - m_j)
                    alpha = math.exp(m - m_j)
                    l = l * alpha + float(p.sum())
                    acc = acc * alpha + p.to(p_dtype).float() @ v[keys, h // per_kv]
                    m = m_j
                out[first + t, h] = acc / l
    return out.to(dtype)


def written_out(case: Case) -> bool:
    """Whether the emulation writes the case's semantics out: causal attention with at most a sliding window and a
    soft-cap."""
    return not (case.alibi is not None or case.sinks is not None or case.qq_bias or
                case.bidirectional_ranges is not None or case.global_prefix is not None or
                case.chunk_lookback is not None)


def campaign_rows(path: str, tile: int) -> None:
    """The --rows table: per distinct failing 2D-path window case, the kernel's worst value beside the emulation's."""
    print("| dtype | features | queries | kernel | emulated | without the reset | oracle | error / limit |\n"
          "|---|---|---|---|---|---|---|---|")
    seen: set[str] = set()
    same = total = 0
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        text = row.get("case")
        if row.get("verdict") != "mismatch" or row.get("symptom") != "output" or text is None or text in seen:
            continue
        case = Case.from_dict(json.loads(text) if isinstance(text, str) else text)
        if not written_out(case) or case.window_bounds[0] is None or case.max_query_len < 2:
            continue
        seen.add(text)
        inputs = materialize(case, "cpu")
        at = (row["worst_token_flat"], row["worst_head"], row["worst_dim"])
        got, plain = float(emulate(case, inputs, tile)[at]), float(emulate(case, inputs, tile, reset=False)[at])
        same += got == row["worst_actual"]
        total += 1
        print(f"| {case.dtype.value} | {row['features']} | {case.max_query_len} | {row['worst_actual']:.6g} | {got:.6g} | "
              f"{plain:.6g} | {row['worst_expected']:.6g} | {row['error_ratio']:.2f} |")
    print(f"\n{same} of {total} distinct cases: the emulation gives the kernel's value to the last bit")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("case", nargs="?")
    ap.add_argument("--rows", default=None, help="a campaign's rows.jsonl instead of one case")
    ap.add_argument("--scale", type=float, default=None, help="replace the case's softmax scale")
    ap.add_argument("--tile", type=int, default=32, help="TILE_SIZE_PREFILL (32 unless Gemma3-shaped or Blackwell)")
    a = ap.parse_args()
    if a.rows:
        return campaign_rows(a.rows, a.tile)
    saved = json.loads(Path(a.case).read_text())
    case = Case.from_dict(saved["case"])
    if a.scale is not None:
        case = case.replace(scale=a.scale)
    if not written_out(case):
        sys.exit("the emulation writes out causal attention with at most a sliding window and a soft-cap")
    inputs = materialize(case, "cpu")
    expected = attention(inputs).output
    got = emulate(case, inputs, a.tile).double()
    err = (got - expected).abs()
    worst = tuple(int(x) for x in (err == err.max()).nonzero()[0])
    print(f"scale {case.softmax_scale}: emulated max error {float(err.max()):.4g} at (token, head, dim) {worst}: "
          f"emulated {float(got[worst]):.8g}, oracle {float(expected[worst]):.8g}; rows output 0 where the oracle's "
          f"is not: {int(((got.abs().sum(-1) == 0) & (expected.abs().sum(-1) > 0)).sum())}")
    plain = emulate(case, inputs, a.tile, reset=False).double()
    print(f"the same loop without the reset: max error {float((plain - expected).abs().max()):.4g}")
    row = saved.get("row")
    if row and a.scale is None:
        at = (row["worst_token_flat"], row["worst_head"], row["worst_dim"])
        print(f"kernel (recorded) at {at}: {row['worst_actual']:.8g}; emulated {float(got[at]):.8g}; without the "
              f"reset {float(plain[at]):.8g}; oracle {float(expected[at]):.8g}")


if __name__ == "__main__":
    main()
