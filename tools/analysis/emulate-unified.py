"""A CPU model of vLLM 0.26's Triton unified attention (2D path) to test root-cause hypotheses.

Usage: python tools/analysis/emulate-unified.py ROWS.jsonl|CASE.json ... [--backend B]
For every mismatch / NaN row of backend B (default vllm-triton-unified) whose batch takes the 2D path (a prefill in it, or path=2d), and for each saved minimal case, it recomputes the worst element three ways and prints which one the kernel's value matches:
  oracle       the float64 oracle;
  online       the kernel's tile loop as written: per query block (BLOCK_Q rows), tiles of TILE keys
               pruned by the window of the block's first query, running max that falls back to 0 when a
               tile is fully masked for a row (`softmax_step`), P cast to the input dtype before P @ V,
               V zeroed for keys out of the window of the block's first query (|distance| < W for
               non-causal calls), and loads masked past
               seq_len while PrefixLM ranges may still mark those slots visible (score 0, value 0);
  online-fixed the same loop with the two defects taken out (running max from visible keys only, no
               V zeroing, no slots past seq_len).
Read from the 0.26.0 wheel (triton_unified_attention.py, triton_attention_helpers.py); the model is
attnref's own code. It only explains rows: the findings are the kernel's outputs in the campaign rows.
"""
from __future__ import annotations

import collections
import json
import math
import sys

import torch

sys.path.insert(0, ".")
from campaign.store import read_jsonl  # noqa: E402
from reference.attention import attention, new_token_bias, query_for_oracle, sequence_kv  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402
from reference.scores import apply_soft_cap  # noqa: E402
from reference.visibility import visible  # noqa: E402

TILE_PREFILL = 32


def online(case: Case, token: int, head: int, fixed: bool) -> torch.Tensor:
    """Output row [D_v] of flat query `token`, head `head`, as the 2D kernel computes it."""
    inputs = materialize(case)
    starts = inputs.query_start_loc.tolist()
    i = max(j for j in range(len(case.sequences)) if starts[j] <= token)
    seq = case.sequences[i]
    local = token - starts[i]
    group = case.num_heads // case.num_kv_heads
    block_q = (16 if group <= 16 else 1 << (group - 1).bit_length()) // group
    k, v = sequence_kv(inputs, i, torch.float64)
    kv_head = head // group
    q = query_for_oracle(inputs, torch.float64)[token, head]
    n = k.shape[0]
    ctx = case.query_offset(seq)  # the kernel's context_len: seq_len - query_len
    qpos_lo = (local // block_q) * block_q
    left = case.window_bounds[0]
    w = 0 if left is None else left + 1  # SLIDING_WINDOW = 1 + window_size[0]
    ranges = case.bidirectional_ranges is not None
    bounded = w > 0 and not ranges and case.global_prefix is None
    tile_start = max(0, (ctx + qpos_lo - w + 1) // TILE_PREFILL) if bounded else 0
    tile_end = math.ceil(n / TILE_PREFILL)
    mask = visible(case, seq)[0, local]  # [n]
    low = case.dtype.torch
    # M starts at the sink (L = 1 counts it) or -inf; ALiBi is slope * (k - context_len) (finding V3)
    m = float(inputs.sinks[head]) if inputs.sinks is not None else -math.inf
    l, acc = 1.0, torch.zeros(v.shape[-1], dtype=torch.float64)
    slope = None if inputs.alibi_slopes is None else float(inputs.alibi_slopes[head])
    bias = None if inputs.qq_bias is None else new_token_bias(inputs.qq_bias.double(), seq.query_len, n)[local]
    for t in range(tile_start, tile_end):
        pos = torch.arange(t * TILE_PREFILL, (t + 1) * TILE_PREFILL)
        inside = pos < n
        kt = torch.zeros(len(pos), k.shape[-1], dtype=torch.float64)
        vt = torch.zeros(len(pos), v.shape[-1], dtype=torch.float64)
        kt[inside], vt[inside] = k[pos[inside], kv_head], v[pos[inside], kv_head]
        s = apply_soft_cap((kt @ q) * case.softmax_scale, case.soft_cap)
        seen = torch.zeros(len(pos), dtype=torch.bool)
        seen[inside] = mask[pos[inside]]
        if ranges and not fixed:  # slots past seq_len inside a range count as keys (masked loads give 0)
            for a, b in case.bidirectional_ranges[i]:
                if a < b and a <= ctx + local <= b:
                    seen |= ~inside & (pos >= a) & (pos <= b)
        if bias is not None:
            s[inside] = s[inside] + bias[pos[inside]]
        if slope is not None:
            s = s + slope * (pos - ctx)
        s = torch.where(seen, s, torch.tensor(-math.inf, dtype=torch.float64))
        tile_max = float(s.max())
        m_new = max(m, tile_max)
        if m_new == -math.inf:
            if fixed:
                continue
            m_new = 0.0  # softmax_step's fallback for a fully masked row
        p = torch.exp(s - m_new)
        alpha = math.exp(m - m_new) if m > -math.inf else 0.0
        l = l * alpha + float(p.sum())
        if w and not fixed:  # V zeroed out of the window of the block's first query
            dist = ctx + qpos_lo - pos
            keep = dist < w if case.is_causal else (dist < w) & (dist > -w)
            vt = torch.where(keep[:, None], vt, torch.zeros_like(vt))
        acc = acc * alpha + p.to(low).double() @ vt
        m = m_new
    return acc / l


def load_rows(paths: list[str]) -> list[dict]:
    """Campaign rows (rows.jsonl) and the rows saved with minimal cases (cases/*.json)."""
    rows = []
    for path in paths:
        if path.endswith(".jsonl"):
            rows += read_jsonl(path)
        else:
            saved = json.load(open(path))
            rows.append(dict(saved["row"], backend=saved["backend"], verdict=saved["verdict"],
                             case=json.dumps(saved["case"]) if isinstance(saved["case"], dict) else saved["case"]))
    return rows


def main() -> None:
    args = sys.argv[1:]
    backend = "vllm-triton-unified"
    if "--backend" in args:
        at = args.index("--backend")
        backend = args[at + 1]
        del args[at:at + 2]
    verdicts = collections.Counter()
    for r in load_rows(args):
        if r["backend"] != backend or r["verdict"] not in ("mismatch", "nan") or r.get("phase") == "minimal":
            continue
        case = Case.from_json(r["case"])
        two_d = "path=2d" in r.get("encodings", "") or case.max_query_len > 1
        if not two_d or case.max_kv_len > 20000 or r.get("worst_token_flat") is None:
            continue
        t, h, d, actual = r["worst_token_flat"], r["worst_head"], r["worst_dim"], r["worst_actual"]
        tol = max(r["limit"], 1e-3)
        values = {"oracle": float(attention(materialize(case)).output[t, h, d]),
                  "online": float(online(case, t, h, fixed=False)[d]),
                  "online-fixed": float(online(case, t, h, fixed=True)[d])}
        match = [name for name, x in values.items() if abs(x - actual) <= tol] or ["none"]
        verdicts[(r["features"], match[0])] += 1
        print(f"{r['features']:55s} actual={actual:+.4f} " + " ".join(f"{k}={x:+.4f}" for k, x in values.items())
              + f"  -> {match}")
    for key, count in sorted(verdicts.items()):
        print(count, *key)


if __name__ == "__main__":
    main()
