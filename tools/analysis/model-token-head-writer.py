"""The per-token-head write judge over a CPU model of vLLM's fp8 / int8 writer and over a truncating one.

vLLM's rule as modelled: scale = amax * (1 / QMAX) in float32, codes = x * (1 / scale) (fp8: round to nearest
even; int8: half away from zero); truncation rounds toward zero. For every generated fp8 / int8 row of
vllm-pth-writes-cache in ROWS.jsonl the new tokens are written both ways and judged with
`fuzz.cache_write.judge_cache_write` (with the unquantized values). A sound judge passes the first and fails the
second on every case (the 2026-11-24 10,000-example run: 2,397 of 2,397 each way).

Usage: python tools/analysis/model-token-head-writer.py ROWS.jsonl
"""
from __future__ import annotations

import collections
import sys

import torch

sys.path.insert(0, ".")
import reference as r  # noqa: E402
from campaign.store import read_jsonl  # noqa: E402
from fuzz.cache_write import judge_cache_write, raw_by_slot  # noqa: E402
from reference import quant  # noqa: E402
from reference.case import KVCacheDType  # noqa: E402

FP8 = KVCacheDType.FP8_PER_TOKEN_HEAD


def write(x: torch.Tensor, fmt: KVCacheDType, truncate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    scale = torch.clamp(x.abs().float().amax(-1) * torch.tensor(1 / quant.TOKEN_HEAD_MAX[fmt], dtype=torch.float32),
                        min=quant.TOKEN_HEAD_MIN_SCALE)
    y = x.float() * (1.0 / scale)[..., None]
    if fmt == FP8:
        codes = y.clamp(-448, 448).to(torch.float8_e4m3fn)
        if truncate:  # one fp8 step toward zero where rounding went away from zero
            up = codes.float().abs() > y.abs()
            b = codes.view(torch.uint8).clone()
            b[up & (b & 0x7F > 0)] -= 1
            codes = b.view(torch.float8_e4m3fn)
        return scale, codes
    y = torch.trunc(y) if truncate else quant.round_half_away(y)
    return scale, y.clamp(-128, 127).to(torch.int8)


def main() -> None:
    counts = collections.Counter()
    for row in read_jsonl(sys.argv[1]):
        if row.get("phase") != "generate" or row["backend"] != "vllm-pth-writes-cache" or \
                row["kv_cache_dtype"] not in ("fp8_per_token_head", "int8_per_token_head"):
            continue
        case = r.Case.from_dict(row["case"]) if isinstance(row["case"], dict) else r.Case.from_json(row["case"])
        inputs = r.materialize(case)
        keep = inputs.slot_mapping >= 0
        slots = inputs.slot_mapping[keep]
        at = slots // case.cache.block_size, slots % case.cache.block_size
        for truncate in (False, True):
            got = inputs.cache_before_write.clone()
            for x, codes, scales in ((inputs.key[keep], got.paged.key_view(), got.k_token_scales),
                                     (inputs.value[keep], got.paged.value_view(), got.v_token_scales)):
                scales[at], codes[at] = write(x, case.kv_cache_dtype, truncate)
            verdict = "fail" if judge_cache_write(inputs.cache, got, lambda: raw_by_slot(inputs)) else "pass"
            counts[(case.kv_cache_dtype.value, "truncation" if truncate else "vllm rule", verdict)] += 1
    for key, n in sorted(counts.items()):
        print(*key, n)


if __name__ == "__main__":
    main()
