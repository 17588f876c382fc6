"""Reproducer for aten-flash-varlen (torch), written by `attnref repro`.

Case (attnref JSON): {"sequences":[{"query_len":3,"context_len":0,"encoder_len":0,"key_len":1}],"attn_type":"kernel","num_heads":1,"num_kv_heads":1,"head_size":256,"head_size_v":null,"dtype":"bfloat16","scale":null,"sliding_window":null,"alibi":null,"soft_cap":null,"sinks":null,"attn_chunk_size":null,"block_sparse":null,"causal":false,"causal_alignment":"bottom_right","window":[null,1],"cache":null,"values":{"distribution":"normal","logit_scale":1.0},"encodings":[],"seed":0}
Needs only torch and the library under test. Exit status 1: the kernel is off.
"""
import sys

import torch


SEED = 0
DTYPE = torch.bfloat16
H, H_KV, D, D_V = 1, 1, 256, 256
GROUP = H // H_KV  # query heads per kv head: query head h reads kv head h // GROUP
SEQS = [(3, 1, -2)]  # (query_len, kv_len, position of the first query among the keys)
SCALE = 0.0625
CAUSAL = False
WINDOW = (None, 1)  # (left, right) key distance from the query; None: unbounded
CHUNK = None
SOFT_CAP = None
SINKS = None
ALIBI = None
ALIBI_MODE = None  # signed | symmetric | sqrt

DEVICE = "cuda"
FACTOR = 2.0
ABS_FLOOR = 0.002


def draw_inputs():
    g = torch.Generator().manual_seed(SEED)
    n = sum(s[0] for s in SEQS)
    q = torch.randn(n, H, D, generator=g)
    q = q * 1.0
    shared = 0  # keys every sequence shares (a shared-prefix block table)
    prefix_k, prefix_v = torch.randn(shared, H_KV, D, generator=g), torch.randn(shared, H_KV, D_V, generator=g)
    prototypes = torch.randn(4, H_KV, D, generator=g)
    ks, vs = [], []
    for _, kv_len, _ in SEQS:
        k, v = torch.randn(kv_len, H_KV, D, generator=g), torch.randn(kv_len, H_KV, D_V, generator=g)
        k[:shared], v[:shared] = prefix_k, prefix_v
        ks.append(k.to(DTYPE))
        vs.append(v.to(DTYPE))
    return q.to(DTYPE), ks, vs


def positions(i, offset_shift=0):
    q_len, kv_len, first = SEQS[i]
    return torch.arange(q_len)[:, None] + first + offset_shift, torch.arange(kv_len)[None, :]


def visible(i, window_extra=0, offset_shift=0):
    """Bool [query_len, kv_len]: the keys each query of sequence i may see."""
    qp, kp = positions(i, offset_shift)
    ok = torch.ones(qp.shape[0], kp.shape[1], dtype=torch.bool)
    if CAUSAL:
        ok &= kp <= qp
    if WINDOW[0] is not None:
        ok &= qp - kp <= WINDOW[0] + window_extra
    if WINDOW[1] is not None:
        ok &= kp - qp <= WINDOW[1]
    if CHUNK is not None:
        ok &= qp // CHUNK == kp // CHUNK
    return ok


def alibi_bias(i, sign=1.0):
    """[H, query_len, kv_len] float64: slope * (k - q) (signed), -slope * |k - q| (symmetric) or
    -slope * sqrt(q - k) for k <= q, else 0 (sqrt); None without ALiBi."""
    if ALIBI is None:
        return None
    qp, kp = positions(i)
    d = (kp - qp).double()
    d = {"signed": d, "symmetric": -d.abs(), "sqrt": -(-d).clamp(min=0).sqrt()}[ALIBI_MODE]
    return sign * ALIBI.double()[:, None, None] * d[None]


def reference(q, ks, vs, dtype=torch.float64):
    outs, lses, start = [], [], 0
    heads = torch.tensor([h // GROUP for h in range(H)])
    for i, (q_len, kv_len, _) in enumerate(SEQS):
        qi = q[start:start + q_len].cpu().to(dtype)
        start += q_len
        k, v = ks[i].cpu().to(dtype)[:, heads], vs[i].cpu().to(dtype)[:, heads]
        s = torch.einsum("qhd,khd->hqk", qi * SCALE, k)
        if SOFT_CAP is not None and True:
            s = SOFT_CAP * torch.tanh(s / SOFT_CAP)  # soft-cap comes before biases and masks
        bias = alibi_bias(i, sign=1.0)
        if bias is not None:
            s = s + bias.to(s.dtype)
        s = s.masked_fill(~visible(i, 0, 0)[None], float("-inf"))
        lse = torch.logsumexp(s, -1)  # -inf for a row that sees no key
        if SINKS is not None:
            lse = torch.logaddexp(lse, SINKS.to(s.dtype)[:, None])  # a sink joins the denominator, no value
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # an empty row: output 0
        outs.append(torch.einsum("hqk,khd->qhd", p, v))
        lses.append(lse.transpose(0, 1) / 1.0)
    return torch.cat(outs), torch.cat(lses)


# --- the kernel under test, called as attnref's adapter calls it ---
def kernel(q, ks, vs):
    op = torch.ops.aten._flash_attention_forward
    cu_q, cu_k = torch.tensor([0] + [sum(x[0] for x in SEQS[:j + 1]) for j in range(len(SEQS))], dtype=torch.int32, device=DEVICE), torch.tensor([0] + [sum(x[1] for x in SEQS[:j + 1]) for j in range(len(SEQS))], dtype=torch.int32, device=DEVICE)
    k, v = torch.cat(ks), torch.cat(vs)
    max_q, max_k = max(x[0] for x in SEQS), max(x[1] for x in SEQS)
    # packed varlen flash: causal aligned bottom-right; window (left, right), -1 unbounded
    out, lse = op(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, CAUSAL, False, scale=SCALE, **{'window_size_left': -1, 'window_size_right': 1})[:2]
    return out, lse.float().transpose(0, 1)[:q.shape[0]]  # LSE comes as [H, total_q]


def largest(t):
    return float(t.max()) if t.numel() else 0.0


def main():
    q, ks, vs = draw_inputs()
    expected, expected_lse = reference(q, ks, vs)
    baseline, _ = reference(q, ks, vs, DTYPE)  # the same math rounded like a plain bfloat16 pass
    actual, actual_lse = kernel(q.to(DEVICE), [k.to(DEVICE) for k in ks], [v.to(DEVICE) for v in vs])
    actual = actual.detach().double().cpu()
    err = (actual - expected).abs()
    empty = torch.isneginf(expected_lse) if SINKS is None else torch.zeros_like(expected_lse, dtype=torch.bool)
    seen = ~empty[..., None].expand_as(err)
    rounding = 2 * float(((expected.to(DTYPE) + 0.3 - 0.3).double() - expected).abs().max()) if expected.numel() else 0.0
    limit = FACTOR * largest((baseline.double() - expected).abs()[seen]) + max(rounding, ABS_FLOOR)
    worst = largest(err[seen].nan_to_num(float("inf")))
    print(f"max |actual - expected| = {worst:.6g} on rows with keys (limit {limit:.6g} = {FACTOR} x a plain "
          f"bfloat16 pass's error + rounding floor)")
    if empty.any():
        print(f"rows with no visible key: {int(empty.sum())}; kernel max |out| there = "
              f"{largest(actual[empty].abs().nan_to_num(float('inf'))):.6g} (expected 0)")
    if actual_lse is not None:
        lse = actual_lse.detach().double().cpu()
        both = ~empty
        print(f"max |lse - expected_lse| = {largest((lse - expected_lse).abs()[both]):.6g}")
    idx = int(err.nan_to_num(float("inf")).argmax()) if err.numel() else 0
    if err.numel():
        t, h, d = idx // (H * D_V), (idx // D_V) % H, idx % D_V
        print(f"worst element: token {t}, head {h}, dim {d}: expected {float(expected[t, h, d]):.6g}, "
              f"actual {float(actual[t, h, d]):.6g}")
    bad = worst > limit or (empty.any() and bool((actual[empty] != 0).any()))
    print("MISMATCH" if bad else "OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
