"""Which rows FlashMLA's decode gets wrong, around a saved case (run on the device with vLLM staged:
tools/stage-vllm.sh). For the case and variants of it (queries per sequence, heads, cached context, value
distribution, the 16-bit path), one CSV line each: the harness's verdict and error / limit; the kernel's error
against the decoder's bottom-right causal attention (the case's) and against no mask, over the same inputs; the LSE
error; and where the rows past the limit sit in FlashMLA's row order (row = query x heads + head within a sequence,
`fwd_kvcache_mla_fp8`'s q_seq_per_hk; tiles of 64 rows, its block_size_m).

    python tools/probe-flashmla-rows.py CASE.json [--out rows.csv] [--grid]

--grid runs, instead, every (queries per sequence, cached context, heads) of GRID around the 128-query edge, the
region vLLM's FLASHMLA reaches (it decodes up to 128 queries per sequence, after cached context).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.registry import get  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402
from reference.attention import attend_sequence, query_for_oracle, sequence_kv  # noqa: E402
from reference.case import Case, KVCacheDType, SequenceSpec, ValueDistribution  # noqa: E402

TILE_M = 64  # FlashMLA's block_size_m (get_mla_decoding_metadata_dense_fp8)
GRID = {"s_q": (64, 100, 127, 128, 129), "context": (0, 1, 17, 64, 100, 500), "heads": (4, 16, 128)}


def reshaped(case: Case, s_q: int, context: int = 0, heads: int | None = None, seqs: int | None = None) -> Case:
    """The case with `seqs` (default: its own count) sequences of s_q queries after `context` cached keys each."""
    return case.replace(num_heads=heads or case.num_heads,
                        sequences=tuple(SequenceSpec(query_len=s_q, context_len=context)
                                        for _ in range(seqs or len(case.sequences))))


def variants(case: Case) -> list[tuple[str, Case]]:
    """(label, case): the saved case three times (run to run), then one field changed at a time."""
    shaped = partial(reshaped, case)
    out = [(f"saved run {i}", case) for i in range(3)]
    out += [(f"s_q {s}", shaped(s)) for s in (1, 2, 16, 32, 63, 64, 65, 100, 120, 126, 127, 128, 129, 130, 192, 256)]
    out += [(f"s_q 129 heads {h}", shaped(129, heads=h)) for h in (1, 2, 8, 16, 64, 128)]
    out += [(f"s_q 2 heads {h}", shaped(2, heads=h)) for h in (16, 64, 128)]
    out += [(f"s_q {s} context 200", shaped(s, context=200)) for s in (1, 64, 129)]
    out += [("s_q 129 one sequence", shaped(129, seqs=1))]
    out += [(f"s_q {s} normal", shaped(s).replace(values=replace(case.values, distribution=ValueDistribution.NORMAL)))
            for s in (64, 128, 129)]
    sixteen = replace(case.cache, quant=replace(case.cache.quant, kv_cache_dtype=KVCacheDType.AUTO, q_fp8_scale=None))
    out += [(f"16-bit s_q {s}", shaped(s).replace(cache=sixteen)) for s in (64, 128, 129)]
    return out


def references(inputs) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{mask: (output [tokens, heads, D_v], LSE [tokens, heads])} in float64 over the case's own inputs (the fp8
    query and cache dequantized), for the decoder's bottom-right causal mask and for no mask at all."""
    case = inputs.case
    q_all = query_for_oracle(inputs, torch.float64)
    found: dict[str, list] = {"causal": [], "noncausal": []}
    for i, (start, end) in enumerate(zip(case.query_starts, case.query_starts[1:])):
        k, v = sequence_kv(inputs, i, torch.float64)
        q, n = q_all[start:end], k.shape[0]
        queries = torch.arange(end - start, device=q.device)[:, None] + n - (end - start)  # bottom-right positions
        below = torch.arange(n, device=q.device)[None, :] <= queries
        for name, seen in (("causal", below), ("noncausal", torch.ones_like(below))):
            found[name].append(attend_sequence(q, k, v, seen[None], scale=case.softmax_scale))
    return {name: (torch.cat([o for o, _ in parts]), torch.cat([lse for _, lse in parts]))
            for name, parts in found.items()}


def grid(case: Case) -> list[tuple[str, Case]]:
    """(label, case) for every point of GRID, the saved case's other fields kept."""
    return [(f"s_q {s} context {c} heads {h}", reshaped(case, s, c, h))
            for s in GRID["s_q"] for c in GRID["context"] for h in GRID["heads"]]


def row_errors(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """[tokens, heads] largest |actual - expected| over the value dimensions."""
    return (actual.double() - expected.double()).abs().amax(-1)


def tiles_of(bad: torch.Tensor, case: Case) -> str:
    """The FlashMLA tiles (row // 64 within a sequence) holding rows marked `bad` [tokens, heads], with counts."""
    s_q, h = case.query_lens[0], case.num_heads
    rows = bad.reshape(len(case.sequences), s_q * h)  # tokens are sequence-major, each [s_q, h]: row = q * h + head
    counts = torch.bincount((rows.nonzero()[:, 1] // TILE_M).cpu(), minlength=-(-s_q * h // TILE_M))
    return " ".join(f"{t}:{int(n)}" for t, n in enumerate(counts.tolist()) if n) or "-"


def probe(backend, label: str, case: Case) -> dict:
    ev = evaluate(backend, case, device="cuda", check_blind=False)
    row = {"variant": label, "verdict": ev.row.get("verdict"), "error_ratio": ev.row.get("error_ratio"),
           "max_err": ev.row.get("max_err"), "limit": ev.row.get("limit"), "message": ev.row.get("message", "")[:120]}
    if ev.actual is None or ev.inputs is None:
        return row
    actual = ev.actual.output.to(ev.inputs.query.device)
    for name, (out, lse) in references(ev.inputs).items():
        err = row_errors(actual, out)
        row[f"{name}_max_err"] = float(err.max())
        if ev.actual.lse is not None:
            lse_err = (ev.actual.lse.to(lse.device).double() - lse).abs()
            row[f"{name}_lse_max_err"] = float(lse_err.nan_to_num(float("inf")).max())
        if name == "causal" and row.get("limit"):
            bad = err > row["limit"]
            s_q = case.query_lens[0]
            queries = bad.reshape(len(case.sequences), s_q, -1).any(-1).any(0).nonzero().flatten().tolist()
            row.update(rows_past_limit=int(bad.sum()), rows=int(bad.numel()), tiles_past_limit=tiles_of(bad, case),
                       queries_past_limit=_ranges(queries))
    return row


def _ranges(xs: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2 5'."""
    spans: list[list[int]] = []
    for x in xs:
        if spans and x == spans[-1][1] + 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    return " ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans) or "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("--out", default="flashmla-rows.csv")
    ap.add_argument("--grid", action="store_true")
    a = ap.parse_args()
    saved = json.loads(Path(a.case).read_text())
    backend = get(saved["backend"])
    rows = []
    for label, case in (grid if a.grid else variants)(Case.from_dict(saved["case"])):
        try:
            rows.append(probe(backend, label, case))
        except Exception as e:  # a variant the case checks refuse: say so and go on
            rows.append({"variant": label, "verdict": "not run", "message": f"{type(e).__name__}: {e}"[:200]})
        print(json.dumps(rows[-1], default=str), flush=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
