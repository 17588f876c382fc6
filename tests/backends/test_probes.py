"""Convention probes: every CPU backend follows the conventions it declares; the probes can fail."""
from __future__ import annotations

import pytest

from backends.registry import get, listings
from fuzz.probes import PROBES, run_probes

# torch-sdpa-cpu-flash dies by SIGFPE on an empty side (ledger); flex-compiled compiles every probe for tens of
# seconds on 2 cores and crashes on several (FINDINGS.md: cpu-flash-sigfpe, flex-compiled-cpu-dynamic): both run in
# `attnref probe`.
CPU_BACKENDS = [x.backend.name for x in listings() if x.available and x.backend.device() == "cpu"
                and x.backend.name not in ("torch-sdpa-cpu-flash", "flex-compiled")]


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_cpu_backend_follows_its_declared_conventions(name):
    rows = run_probes(get(name))
    assert {r["probe"].split("[")[0] for r in rows} == {p.name for p in PROBES}
    failures = [(r["probe"], r["verdict"], r.get("detail")) for r in rows if r["verdict"] not in ("pass", "not_applicable")]
    assert not failures
    assert any(r["verdict"] == "pass" for r in rows)


@pytest.mark.parametrize("mutant,probe", [("mutant-causal-top-left", "causal_alignment"),
                                          ("mutant-lse-base2", "lse_base")])
def test_a_backend_breaking_a_convention_fails_its_probe(mutant, probe):
    rows = {r["probe"]: r for r in run_probes(get(mutant))}
    assert rows[probe]["verdict"] == "convention"


def test_each_declared_spelling_of_an_unbounded_side_is_probed_apart():
    """FA4 read a lone -1 as a bound while None passed: a probe of the default spelling alone would not have seen it.
    The CPU twin declares every spelling and follows each; the mutant that reads a lone -1 as FA4 does fails -1 only."""
    names = {r["probe"]: r["verdict"] for r in run_probes(get("torch-naive-paged"))}
    spelled = {n for n in names if n.startswith("window_unbounded[")}
    assert spelled == {f"window_unbounded[{s}]" for s in ("none", "minus_one", "edge", "beyond")}
    assert all(names[n] == "pass" for n in spelled)
    mutant = {r["probe"]: r["verdict"] for r in run_probes(get("mutant-lone-minus-one-bound", include_mutants=True))}
    assert mutant["window_unbounded[minus_one]"] == "convention"
    assert {n: v for n, v in mutant.items() if n != "window_unbounded[minus_one]"} == {
        n: v for n, v in names.items() if n != "window_unbounded[minus_one]"}
