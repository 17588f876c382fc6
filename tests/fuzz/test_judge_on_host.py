"""A case whose oracle ran on the GPU is judged on the host (fuzz.compare.on_host): the same tensors, one copy,
and the same row as a case judged where its oracle ran."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from backends.base import Actual
from backends.registry import get
from benchmarks.packed_equivalence import verdict_of
from fuzz.compare import evaluate, on_host
from fuzz.strategies import Limits, cases
from reference.attention import Expected


def test_on_host_keeps_every_tensor_and_leaves_the_rest():
    expected = Expected(torch.randn(5, 2, 3, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64),
                        torch.arange(10).reshape(5, 2))
    baseline = Expected(torch.randn(5, 2, 3).to(torch.bfloat16), torch.randn(5, 2).to(torch.bfloat16), None)
    actual = Actual(torch.randn(5, 2, 3).to(torch.bfloat16), None, torch.full((8, 2, 3), float("nan")), 5,
                    notes={"x": 1})
    e, b, a, extra = on_host(expected, baseline, actual, (torch.tensor(2.5), torch.tensor(True)))
    for x, y in ((e.output, expected.output), (e.lse, expected.lse), (e.num_visible, expected.num_visible),
                 (b.output, baseline.output), (b.lse, baseline.lse), (a.output, actual.output)):
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.view(torch.uint8), y.view(torch.uint8))
    assert b.num_visible is None and a.lse is None and a.buffer_rows == 5 and a.notes == {"x": 1}
    assert float(extra[0]) == 2.5 and bool(extra[1]) and e.logit_spread is None
    assert torch.isnan(a.output_buffer).all() and a.output_buffer.shape == (8, 2, 3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA device: the oracle on the GPU is what sends the judge to the host")
@settings(max_examples=25, deadline=None)
@given(cases(get("torch-sdpa-math-cuda").caps, Limits(tiers=("small", "tile"))))
def test_a_gpu_oracle_judged_on_the_host_gives_the_cpu_oracles_verdict(case):
    backend = get("torch-sdpa-math-cuda")
    on_gpu = evaluate(backend, case, oracle_cpu_max=-1).row  # every case, an empty one too
    on_cpu = evaluate(backend, case, oracle_cpu_max=1 << 40).row
    assert on_gpu["oracle_device"] == "cuda" and on_cpu["oracle_device"] == "cpu"
    assert verdict_of(on_gpu) == verdict_of(on_cpu)
