"""How far a soft-cap computed with an approximate tanh moves the float64 oracle, on a saved case, on the CPU.

FA2 / FA3 (flash-attention's apply_softcap: cutlass::fast_tanh) and FlashInfer (LogitsSoftCap: math::tanh) cap logits
with PTX's tanh.approx.f32, whose relative error is up to 2^-11 over the whole range (PTX ISA, "Floating Point
Instructions: tanh"). This replaces the oracle's tanh by tanh x (1 + e u), u uniform in [-1, 1] drawn per score (a model
of that error, not its exact pattern), for a few seeds and sizes e, and prints the largest output error that alone
causes beside the case's recorded kernel error, its limit, and the rule's soft-cap term (fuzz.tolerance.soft_cap_shift
under the case's backend's declaration).

    python benchmarks/soft_cap_tanh.py benchmarks/results/cases/vllm-layer-flash-fp16-long-window-margin.json
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.base import PTX_TANH_APPROX  # noqa: E402
from fuzz.tolerance import finite_abs_max, soft_cap_floor, soft_cap_shift  # noqa: E402
from reference.case import Case  # noqa: E402
from reference.inputs import materialize  # noqa: E402

attention = importlib.import_module("reference.attention")  # the module (the package exports its function too)


def noisy_cap(rel: float, generator: torch.Generator):
    """reference.scores.apply_soft_cap with tanh off by a relative rel x u, u uniform in [-1, 1] per score."""
    def cap(scores, soft_cap):
        if soft_cap is None:
            return scores
        t = torch.tanh(scores / soft_cap)
        u = torch.rand(t.shape, generator=generator, dtype=t.dtype) * 2 - 1
        return soft_cap * t * (1 + rel * u)
    return cap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("case", help="a saved case (its row carries the kernel's recorded error)")
    ap.add_argument("--seeds", type=int, default=4)
    a = ap.parse_args()
    saved = json.loads(Path(a.case).read_text())
    row = saved["row"]
    case = Case.from_dict(saved["case"] if isinstance(saved["case"], dict) else json.loads(saved["case"]))
    inputs = materialize(case, "cpu")
    exact = attention.attention(inputs)
    shift = soft_cap_shift(case, PTX_TANH_APPROX, finite_abs_max(exact.lse))
    term = soft_cap_floor(shift, float(exact.output.abs().max()))
    print(f"case {Path(a.case).name}: {case.dtype.value}, cap {case.soft_cap}, {case.max_kv_len} keys")
    print(f"kernel (recorded): max error {row['max_err']:.4g}, limit {row['limit']:.4g}, "
          f"baseline {row['baseline_max_err']:.4g}")
    print(f"rule's soft-cap term at 2^-11: {term:.4g} (shift {shift:.4g}); limit with it {row['limit'] + term:.4g}\n")
    print("| relative tanh error | max output error, per seed |\n|---|---|")
    plain = attention.apply_soft_cap
    for rel in (2.0**-11, 2.0**-12, 2.0**-22):
        errors = []
        for s in range(a.seeds):
            attention.apply_soft_cap = noisy_cap(rel, torch.Generator().manual_seed(s))
            try:
                errors.append(float((attention.attention(inputs).output - exact.output).abs().max()))
            finally:
                attention.apply_soft_cap = plain
        print(f"| 2^{torch.tensor(rel).log2().item():.0f} | {' '.join(f'{e:.4g}' for e in errors)} |")


if __name__ == "__main__":
    main()
