"""Where a vLLM MLA layer's chunked-context prefill loses its accuracy, on a saved case (run on the device with vLLM
staged: tools/stage-vllm.sh). The case runs through its attnref backend (`fuzz.compare.evaluate`) while every call
of the MLA prefill backend (`run_prefill_new_tokens`, `run_prefill_context_chunk`) and of `merge_attn_states` in
`MLAAttention` is recorded: its tensors and the metadata it read. Then, in float64 over those very tensors:

- each context chunk's attention against the kernel's (output and LSE: the kernel's own error),
- each merge against an exact merge of the inputs it was given (the 16-bit partial states' rounding),
- the running merged output after each chunk against the exact attention over the chunks so far, and the final
  output (after the new tokens' merge) against the exact attention over all of them.

The harness's verdict is printed beside: for the case as saved and for the case with the whole context in one chunk.

    python tools/probe-mla-chunks.py CASE.json [--out chunks.csv] [--save PREFIX]

--save writes the recorded calls (PREFIX-calls.pt, their keys and values apart: PREFIX-k.pt, PREFIX-v.pt, each under
the 16 MiB a device call brings back for the saved case) to analyse them again on the CPU.

Prints one line per step of the worst sequence and a summary; writes every step of every sequence to --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from reference.case import Case  # noqa: E402

CALLS: list[dict] = []


def _held(t):
    return None if t is None else t.detach().clone()


def record() -> None:
    """Wrap the prefill backend's two calls and the layer's merge so each call leaves its tensors in CALLS."""
    from vllm.model_executor.layers.attention import mla_attention
    from vllm.v1.attention.backends.mla.prefill.flash_attn import FlashAttnPrefillBackend

    new_tokens = FlashAttnPrefillBackend.run_prefill_new_tokens
    chunk = FlashAttnPrefillBackend.run_prefill_context_chunk
    merge = mla_attention.merge_attn_states

    def run_new_tokens(self, q, k, v, return_softmax_lse, **kw):
        got = new_tokens(self, q, k, v, return_softmax_lse, **kw)
        out, lse = got if isinstance(got, tuple) else (got, None)
        m = self._prefill_metadata
        CALLS.append(dict(kind="new", q=_held(q), k=_held(k), v=_held(v), out=_held(out), lse=_held(lse),
                          cu_q=m.query_start_loc.tolist(), cu_k=m.query_start_loc.tolist(), scale=self.scale))
        return got

    def run_chunk(self, chunk_idx, q, k, v):
        out, lse = chunk(self, chunk_idx, q, k, v)
        m = self._prefill_metadata
        CALLS.append(dict(kind="chunk", index=chunk_idx, q=_held(q), k=_held(k), v=_held(v), out=_held(out),
                          lse=_held(lse), cu_q=m.query_start_loc.tolist(),
                          cu_k=m.chunked_context.cu_seq_lens[chunk_idx].tolist(), scale=self.scale))
        return out, lse

    def run_merge(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None,
                  prefill_tokens_with_context=None, **kw):
        inputs = dict(prefix_out=_held(prefix_output), prefix_lse=_held(prefix_lse), suffix_out=_held(suffix_output),
                      suffix_lse=_held(suffix_lse))
        merge(output=output, prefix_output=prefix_output, prefix_lse=prefix_lse, suffix_output=suffix_output,
              suffix_lse=suffix_lse, output_lse=output_lse, prefill_tokens_with_context=prefill_tokens_with_context,
              **kw)
        CALLS.append(dict(kind="merge", out=_held(output), lse=_held(output_lse),
                          with_context=prefill_tokens_with_context, **inputs))

    FlashAttnPrefillBackend.run_prefill_new_tokens = run_new_tokens
    FlashAttnPrefillBackend.run_prefill_context_chunk = run_chunk
    mla_attention.merge_attn_states = run_merge


def exact(q, k, v, cu_q, cu_k, scale, causal):
    """float64 attention of each sequence's queries over its keys (bottom-right causal or no mask):
    output [T, H, D_v], LSE [H, T] (FA3's layout)."""
    outs, lses = [], []
    for (qa, qb), (ka, kb) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
        qs, ks, vs = q[qa:qb].double(), k[ka:kb].double(), v[ka:kb].double()
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        if causal:
            n, m = qb - qa, kb - ka
            hidden = torch.arange(m, device=s.device)[None, :] > torch.arange(n, device=s.device)[:, None] + m - n
            s = s.masked_fill(hidden, -math.inf)
        lse = torch.logsumexp(s, -1)  # [H, q]
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        outs.append(torch.einsum("hqk,khd->qhd", p, vs))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses, dim=1)


def merged(o1, l1, o2, l2):
    """The exact LSE merge of two partial states (output [T, H, D], LSE [H, T]), an empty one (-inf / +inf: vLLM's
    merge reads +inf as empty) contributing nothing."""
    l1 = torch.where(torch.isinf(l1), torch.full_like(l1, -math.inf), l1.double())
    l2 = torch.where(torch.isinf(l2), torch.full_like(l2, -math.inf), l2.double())
    top = torch.maximum(l1, l2)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    w1, w2 = torch.exp(l1 - top), torch.exp(l2 - top)
    total = w1 + w2
    out = (o1.double() * (w1 / total).T[..., None] + o2.double() * (w2 / total).T[..., None]).nan_to_num(0.0)
    return out, torch.log(total) + top


def per_sequence(err: torch.Tensor, cu_q: list[int]) -> list[float]:
    """The largest of err [T, ...] within each sequence's tokens."""
    return [float(err[a:b].max()) if b > a else 0.0 for a, b in zip(cu_q, cu_q[1:])]


def analyse(calls: list[dict], d_v: int) -> list[dict]:
    """One row per step of each sequence: chunk attention error, merge rounding, running error."""
    steps: list[dict] = []
    chunks = [c for c in calls if c["kind"] == "chunk"]
    merges = [c for c in calls if c["kind"] == "merge"]
    cu_q = chunks[0]["cu_q"] if chunks else calls[0]["cu_q"]
    running = None  # the exact attention over the chunks so far
    for i, c in enumerate(chunks):
        out, lse = exact(c["q"], c["k"], c["v"], c["cu_q"], c["cu_k"], c["scale"], causal=False)
        empty = torch.tensor([b == a for a, b in zip(c["cu_k"], c["cu_k"][1:])])
        chunk_err = (c["out"][..., :d_v].double() - out[..., :d_v]).abs().amax((-1, -2))
        lse_err = (c["lse"].double() - lse).abs().nan_to_num(0.0).amax(0)
        running = (out, lse) if running is None else merged(*running, out, lse)
        # the kernel's running state: the chunk's own output first, then each intermediate merge's result
        held = (c["out"], c["lse"]) if i == 0 else (merges[i - 1]["out"], merges[i - 1]["lse"])
        run_err = (held[0][..., :d_v].double() - running[0][..., :d_v]).abs().amax((-1, -2))
        merge_err = None
        if i > 0:
            m = merges[i - 1]
            exact_merge, _ = merged(m["prefix_out"], m["prefix_lse"], m["suffix_out"], m["suffix_lse"])
            merge_err = (m["out"][..., :d_v].double() - exact_merge[..., :d_v]).abs().amax((-1, -2))
        for s, (a, b) in enumerate(zip(cu_q, cu_q[1:])):
            if b == a or bool(empty[s]):
                continue
            steps.append(dict(sequence=s, step=f"chunk {i}", keys=c["cu_k"][s + 1] - c["cu_k"][s],
                              attention_err=float(chunk_err[a:b].max()), lse_err=float(lse_err[a:b].max()),
                              merge_rounding=None if merge_err is None else float(merge_err[a:b].max()),
                              running_err=float(run_err[a:b].max())))
    news = [c for c in calls if c["kind"] == "new"]
    if news and running is not None and merges:
        n = news[-1]
        out, lse = exact(n["q"], n["k"], n["v"], n["cu_q"], n["cu_k"], n["scale"], causal=True)
        last = merges[-1]
        whole, _ = merged(running[0][..., :d_v], running[1], out[..., :d_v], lse)
        exact_merge, _ = merged(last["prefix_out"], last["prefix_lse"], last["suffix_out"], last["suffix_lse"])
        with_context = last["with_context"] if last["with_context"] is not None else whole.shape[0]
        final_err = (last["out"].double() - whole).abs().amax((-1, -2))
        merge_err = (last["out"].double() - exact_merge).abs().amax((-1, -2))
        new_err = (n["out"][..., :d_v].double() - out[..., :d_v]).abs().amax((-1, -2))
        for s, (a, b) in enumerate(zip(cu_q, cu_q[1:])):
            if a < with_context:
                steps.append(dict(sequence=s, step="new tokens + merge", keys=n["cu_k"][s + 1] - n["cu_k"][s],
                                  attention_err=float(new_err[a:b].max()), merge_rounding=float(merge_err[a:b].max()),
                                  running_err=float(final_err[a:b].max())))
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("--out", default="mla-chunks.csv")
    ap.add_argument("--save", default=None)
    a = ap.parse_args()
    saved = json.loads(Path(a.case).read_text())
    case = Case.from_dict(saved["case"])
    backend = get(saved["backend"])
    record()
    keys = ("verdict", "max_err", "limit", "error_ratio", "baseline_max_err", "worst_seq", "worst_token", "worst_head")
    # the same case with the whole context in one chunk (the config's own 64K workspace), for comparison
    whole = case.replace(encodings=tuple((k, "vllm" if k == "context_workspace" else v) for k, v in case.encodings))
    one = evaluate(backend, whole, device="cuda", check_blind=False)
    print("one chunk:", json.dumps({k: one.row.get(k) for k in keys}, default=str))
    CALLS.clear()
    ev = evaluate(backend, case, device="cuda", check_blind=False)
    print("as saved:", json.dumps({k: ev.row.get(k) for k in keys}, default=str))
    starts = [i for i, c in enumerate(CALLS) if c["kind"] == "new"]  # each forward_mha starts with its new tokens
    calls = CALLS[starts[-1]:] if starts else CALLS
    print(f"{len(CALLS)} calls recorded, the last forward's: {len(calls)} "
          f"({sum(c['kind'] == 'chunk' for c in calls)} chunks, {sum(c['kind'] == 'merge' for c in calls)} merges)")
    if a.save:
        to_cpu = [{k: v.cpu() if torch.is_tensor(v) else v for k, v in c.items()} for c in calls]
        for part in ("k", "v"):
            torch.save([c.pop(part, None) for c in to_cpu], f"{a.save}-{part}.pt")
        torch.save(to_cpu, f"{a.save}-calls.pt")
    steps = analyse(calls, case.value_size)
    if not steps:
        print("no chunked context in this case's forward")
        return
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, list(dict.fromkeys(k for s in steps for k in s)))
        w.writeheader()
        w.writerows(steps)
    worst = max(steps, key=lambda s: s["running_err"])["sequence"]
    mine = [s for s in steps if s["sequence"] == worst]
    big = sorted(mine, key=lambda s: -s["attention_err"])[:5]
    print(f"sequence {worst} (vLLM's order): {len(mine)} steps; final running error {mine[-1]['running_err']:.4g}")
    print("largest chunk attention errors:", [(s["step"], round(s["attention_err"], 6)) for s in big])
    rounding = [s["merge_rounding"] for s in mine if s["merge_rounding"] is not None]
    print(f"merge rounding: max {max(rounding, default=0):.4g}, sum {sum(rounding):.4g} over {len(rounding)} merges")
    for s in mine[:: max(1, len(mine) // 16)] + mine[-1:]:
        print(json.dumps(s))


if __name__ == "__main__":
    main()
