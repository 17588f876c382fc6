"""Repro scripts (`attnref repro`, and each case page of the report): a self-contained script that reproduces a finding with torch and the library alone.

The script rebuilds the case's tensors from its seed (drawn in attnref's order: the same values),
calls the library as the backend's adapter does (`Backend.repro_kernel`), computes the expected
result with a float64 reference written out for this case's semantics only, and prints both with
the error and the tolerance limit (the same rule attnref applies). It exits 1 when the kernel is
outside the limit, 0 otherwise: what a user pastes into an upstream issue.
"""
from __future__ import annotations

import json

from backends._repro import MASKS, ReproUnsupported, attention_function, check, constants, draw_inputs
from backends._repro_cache import HELPERS, PLAIN_INPUTS, quantized, storage, stored_inputs

__all__ = ["ReproUnsupported", "write_repro"]
from backends.registry import get
from fuzz.tolerance import probability_rounding, rule_for
from reference.case import Case

FOOTER = '''
def largest(t):
    return float(t.max()) if t.numel() else 0.0


def main():
{inputs}
    actual = actual.detach().double().cpu()
    err = (actual - expected).abs()
    empty = torch.isneginf(expected_lse) if SINKS is None else torch.zeros_like(expected_lse, dtype=torch.bool)
    seen = ~empty[..., None].expand_as(err)
    rounding = 2 * float(((expected.to(DTYPE) + 0.3 - 0.3).double() - expected).abs().max()) if expected.numel() else 0.0
    limit = FACTOR * largest((baseline.double() - expected).abs()[seen]) + max(rounding, ABS_FLOOR)
    worst = largest(err[seen].nan_to_num(float("inf")))
    print(f"max |actual - expected| = {{worst:.6g}} on rows with keys (limit {{limit:.6g}} = {{FACTOR}} x a plain "
          f"{dtype} pass's error + rounding floor)")
    if empty.any():
        print(f"rows with no visible key: {{int(empty.sum())}}; kernel max |out| there = "
              f"{{largest(actual[empty].abs().nan_to_num(float('inf'))):.6g}} (expected 0)")
    lse_bad = False
    if actual_lse is not None:  # rows the oracle gives a finite LSE; limit as attnref's LSE rule
        lse = actual_lse.detach().double().cpu().reshape(expected_lse.shape)
        rows = torch.isfinite(expected_lse)
        finite = torch.isfinite(lse[rows])
        lse_err = largest((lse - expected_lse).abs()[rows][finite])
        lse_limit = (LSE_FACTOR * largest((baseline_lse.double() - expected_lse).abs()[rows].nan_to_num(0.0))
                     + LSE_FLOOR * max(1.0, largest(expected_lse[rows].abs())))
        print(f"max |lse - expected_lse| = {{lse_err:.6g}} (limit {{lse_limit:.6g}}); non-finite LSE values where the "
              f"oracle's are finite: {{int((~finite).sum())}}")
        lse_bad = lse_err > lse_limit or not bool(finite.all())
    idx = int(err.nan_to_num(float("inf")).argmax()) if err.numel() else 0
    if err.numel():
        t, h, d = idx // (H * D_V), (idx // D_V) % H, idx % D_V
        print(f"worst element: token {{t}}, head {{h}}, dim {{d}}: expected {{float(expected[t, h, d]):.6g}}, "
              f"actual {{float(actual[t, h, d]):.6g}}")
    bad = worst > limit or lse_bad or (empty.any() and bool((actual[empty] != 0).any()))
    print("MISMATCH" if bad else "OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def p_fp8(case: Case, declared: float | None) -> str:
    """The baseline's probability rounding as a constant (fuzz.tolerance.probability_rounding): (fp8 dtype, scale) for
    a kernel that runs P.V in fp8, read by the script's attention function; None otherwise."""
    rounding = probability_rounding(case, declared)
    if rounding is None:
        return "P_FP8 = None  # the baseline keeps its probabilities in DTYPE"
    return (f"P_FP8 = (torch.{str(rounding.dtype).removeprefix('torch.')}, {rounding.scale!r})  # the kernel runs "
            "P.V in fp8: the baseline's weights exp(s - max) x scale, rounded to it")


def write_repro(case: Case, backend_name: str, specs: tuple[str, ...] = ()) -> str:
    """The repro script's text for `case` on `backend_name`; ReproUnsupported says why it cannot be written."""
    try:
        backend = get(backend_name, include_mutants=True, specs=specs)
    except KeyError as e:
        raise ReproUnsupported(e.args[0]) from None
    check(case)
    if quantized(case) and not backend.repro_quantized:
        raise ReproUnsupported(f"kv_cache_dtype={case.kv_cache_dtype.value}: the {backend_name} repro template "
                               f"writes unquantized caches only; replay with attnref")
    kernel = backend.repro_kernel(case)
    if kernel is None:
        raise ReproUnsupported(f"backend {backend_name} has no repro template for this case "
                               f"(replay it with: attnref replay CASE --backend {backend_name})")
    rule = rule_for(case.dtype, case.kv_cache_dtype)
    device = sorted(backend.caps.devices)[0] if backend.caps.devices != frozenset({"cpu", "cuda"}) else "cpu"
    header = (f'"""Reproducer for {backend_name} ({backend.library}), written by `attnref repro`.\n\n'
              f"Case (attnref JSON): {json.dumps(case.to_dict(), separators=(',', ':'))}\n"
              f'Needs only torch and the library under test. Exit status 1: the kernel is off.\n"""\n'
              "import math\nimport sys\n\nimport torch\n\n")
    inputs = stored_inputs(backend.repro_writes_cache) if quantized(case) else PLAIN_INPUTS
    parts = [header, constants(case), f'DEVICE = "{device}"', f"FACTOR = {rule.factor}",
             f"ABS_FLOOR = {rule.abs_floor}", f"LSE_FACTOR = {rule.lse_factor}",
             f"LSE_FLOOR = {rule.lse_floor}", p_fp8(case, backend.caps.fp8_probabilities) + "\n\n",
             draw_inputs(case), storage(case), MASKS, HELPERS,
             attention_function("reference", "torch.float64"),
             "\n# --- the kernel under test, called as attnref's adapter calls it ---" + kernel,
             FOOTER.format(dtype=case.dtype.value, inputs=inputs.format(dtype=case.dtype.value))]
    return "\n".join(parts)
