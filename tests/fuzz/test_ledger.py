"""The known-failure ledger names real backends and explains only its own symptom."""
from __future__ import annotations

from backends.registry import builtin_backends
from fuzz.ledger import KNOWN, Finding


def test_every_entry_names_a_builtin_backend_and_an_upstream_link():
    names = {b.name for b in builtin_backends()}
    for finding in KNOWN:
        assert finding.backend in names, finding.backend
        assert finding.link.startswith("https://github.com/"), finding.link


def test_a_symptom_keeps_other_failures_of_the_same_cases_unexplained():
    lse_only = Finding("x", lambda c: True, "https://github.com/o/r/issues/1", "LSE scaled", symptom=r"^LSE ")
    assert lse_only.explains("LSE max error 0.17 > limit 0.013")
    assert not lse_only.explains("ValueError: Block sparsity requires sparse_block_size[1] to be a multiple of 80")
    assert not lse_only.explains("max error 0.7 > limit 0.01 (baseline 0.004)")
    assert Finding("x", lambda c: True, "l", "any").explains("anything at all")
