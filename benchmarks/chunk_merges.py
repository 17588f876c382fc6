"""What merging a long context chunk by chunk into 16-bit partial states costs, on a saved case, on the CPU: vLLM's
MLA prefill (MLAAttention.forward_mha) attends each workspace-sized chunk of the cached context on its own, keeps the
chunk's output in the model dtype and its LSE in float32, merges them in turn (merge_attn_states) and last merges the
new tokens' causal part. This emulates that in float64 with exactly those roundings (every attention exact), for the
case's first sequence, and prints the emulation's max error against the oracle beside the kernel's recorded one.

    python benchmarks/chunk_merges.py benchmarks/results/cases/vllm-layer-triton-mla-chunked-context-merges.json \
        [--chunks 128 192 256 1024]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from reference.attention import attend_sequence, attention, query_for_oracle, sequence_kv, sequence_masks  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402
from reference.merge import merge_attn_states  # noqa: E402


def held(out, lse, dtype):
    """A partial state as vLLM keeps it: the output rounded to `dtype`, the LSE to float32 (back in float64)."""
    return out.to(dtype).double(), lse.float().double()


def merged(o1, l1, o2, l2, dtype):
    """merge_attn_states of two partial states, held as vLLM holds its result."""
    return held(*merge_attn_states(o1, l1, o2, l2), dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--chunks", type=int, nargs="+", default=[128, 192, 256, 1024])
    a = ap.parse_args()
    saved = json.loads(Path(a.case).read_text())
    case, row = Case.from_dict(saved["case"]), saved["row"]
    inputs = materialize(case, "cpu")
    seq, (start, end) = case.sequences[0], case.query_starts[:2]
    reference = attention(inputs).output[start:end]
    q = query_for_oracle(inputs, torch.float64)[start:end]
    k, v = sequence_kv(inputs, 0, torch.float64)
    masks, positions = sequence_masks(case, q.device)

    def part(keys: slice):
        return held(*attend_sequence(q, k[keys], v[keys], masks[0][:, :, keys], scale=case.softmax_scale,
                                     q_pos=positions[0], k_pos=torch.arange(k.shape[0])[keys]), case.dtype.torch)

    print(f"kernel max error {row['max_err']:.4g}, limit {row['limit']:.4g} (sequence 0: {seq.query_len} queries over "
          f"{seq.context_len} cached keys)\n\n| chunk | chunks | emulated max error | kernel / emulated |\n|---|---|---|---|")
    for chunk in a.chunks:
        out, lse = part(slice(0, min(chunk, seq.context_len)))
        for first in range(chunk, seq.context_len, chunk):
            out, lse = merged(out, lse, *part(slice(first, min(seq.context_len, first + chunk))), case.dtype.torch)
        out, _ = merged(out, lse, *part(slice(seq.context_len, k.shape[0])), case.dtype.torch)
        err = float((out - reference).abs().max())
        print(f"| {chunk} | {-(-seq.context_len // chunk)} | {err:.4g} | {row['max_err'] / err:.1f} |")


if __name__ == "__main__":
    main()
