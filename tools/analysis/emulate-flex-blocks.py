"""A CPU model of vLLM 0.26 FLEX_ATTENTION's direct block mask, to test a root-cause hypothesis row by row.

Usage: python tools/analysis/emulate-flex-blocks.py ROWS.jsonl|CASE.json ...
For every mismatch row of `vllm-backend-flex` (and each saved case) it recomputes the worst element two ways
and prints which one the kernel's value matches:
  oracle   the float64 oracle;
  pruned   the oracle over a reduced mask: a visible key counts only if its page is among the pages that
           `FlexAttentionMetadata._build_block_mask_direct` keeps for the query's group of 16 packed tokens
           (per token: its sequence's pages, minus the blocks that start after the token (causal) and the
           blocks before its window; pruned entries become page 0; the group keeps the union). The mask_mod
           itself ORs the PrefixLM ranges in, but no range re-opens a pruned page.
Read from the 0.26.0 wheel (v1/attention/backends/flex_attention.py); the model is attnref's own code. It
only explains rows: the findings are the kernel's outputs in the campaign rows.
"""
from __future__ import annotations

import collections
import json
import sys

import torch

sys.path.insert(0, ".")
from campaign.store import read_jsonl  # noqa: E402
from reference.attention import attention  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402
from reference.visibility import query_positions  # noqa: E402

Q_BLOCK = 16  # FlexAttentionMetadataBuilder: q_block_size 16 with torch >= 2.9 (direct build)


def kept_pages(case: Case, table: torch.Tensor) -> dict[int, set[int]]:
    """Physical pages the direct build keeps for each group of Q_BLOCK packed query tokens."""
    bs = case.cache.block_size
    width = -(-max(case.kv_lens) // bs)
    groups: dict[int, set[int]] = {}
    token = 0
    for i, seq in enumerate(case.sequences):
        n_blocks = -(-case.kv_lens[i] // bs)
        for q in query_positions(case, seq).tolist():
            pages = set()
            for b in range(width):
                pruned = b >= n_blocks or b * bs > q  # past the sequence; a block that starts after the token
                if case.sliding_window:
                    pruned |= b < max(q - (case.sliding_window - 1), 0) // bs
                pages.add(0 if pruned else int(table[i, b]))
            groups.setdefault(token // Q_BLOCK, set()).update(pages)
            token += 1
    return groups


def pruned_attention(case: Case):
    inputs = materialize(case)
    table, bs = inputs.block_table, case.cache.block_size
    groups = kept_pages(case, table)
    starts = inputs.query_start_loc.tolist()
    calls = iter(range(len(case.sequences)))

    def transform(mask: torch.Tensor) -> torch.Tensor:
        i = next(calls)
        keys = torch.arange(mask.shape[-1])
        pages = table[i, keys // bs].tolist()
        keep = torch.tensor([[pages[k] in groups[(starts[i] + j) // Q_BLOCK] for k in range(len(pages))]
                             for j in range(mask.shape[-2])], dtype=torch.bool)
        return mask & keep

    return attention(inputs).output, attention(inputs, mask_transform=transform).output


def explain(row: dict) -> tuple[str, str]:
    """(the model the kernel's worst element matches, a line with the three values)."""
    case = Case.from_json(row["case"]) if isinstance(row["case"], str) else Case.from_dict(row["case"])
    oracle, pruned = pruned_attention(case)
    t, h, d = row["worst_token_flat"], row["worst_head"], row["worst_dim"]
    o, p, k = float(oracle[t, h, d]), float(pruned[t, h, d]), float(row["worst_actual"])
    verdict = "pruned" if abs(k - p) < abs(k - o) else "oracle"
    return verdict, f"kernel {k:+.4f}  oracle {o:+.4f}  pruned {p:+.4f}  -> {verdict}"


def main(paths: list[str]) -> None:
    counts: collections.Counter[str] = collections.Counter()
    for path in paths:
        if path.endswith(".json"):
            saved = json.load(open(path))
            rows = [{**saved["row"], "case": saved["case"]}]
        else:
            rows = read_jsonl(path)
        for row in rows:
            if row.get("backend") != "vllm-backend-flex" or row.get("verdict") != "mismatch" \
                    or row.get("worst_actual") is None:
                continue
            verdict, line = explain(row)
            counts[verdict] += 1
            print(f"{row.get('example_id', path)}: {line}")
    print("rows explained:", dict(counts))


if __name__ == "__main__":
    main(sys.argv[1:])
