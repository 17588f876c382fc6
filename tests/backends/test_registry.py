"""The registry never fails on a missing library; plugins load by module:attr."""
from __future__ import annotations

import os
import subprocess
import sys

from backends.base import Backend, Capabilities
from backends.registry import get, listings, load_spec


class MissingLibrary(Backend):
    name = "needs-nonexistent-lib"

    def availability(self):
        try:
            import attnref_nonexistent_library  # noqa: F401
        except ImportError as e:
            return f"import failed: {e}"
        return None


def make_missing():
    return MissingLibrary()


def test_missing_library_makes_backend_unavailable_with_reason():
    listed = {x.backend.name: x for x in listings(specs=("tests.backends.test_registry:make_missing",))}
    assert listed["needs-nonexistent-lib"].unavailable.startswith("import failed")


def test_load_spec_accepts_instances_classes_and_factories():
    assert load_spec("tests.backends.test_registry:MissingLibrary")[0].name == "needs-nonexistent-lib"
    assert load_spec("tests.backends.test_registry:make_missing")[0].name == "needs-nonexistent-lib"


def test_unknown_backend_lists_the_known_ones():
    try:
        get("no-such-backend")
    except KeyError as e:
        assert "torch-sdpa-math" in str(e)
    else:
        raise AssertionError("expected KeyError")


def test_cli_backends_prints_every_backend_with_availability():
    out = subprocess.run([sys.executable, "-m", "cli", "backends"], capture_output=True, text=True, check=True).stdout
    for name in ("torch-sdpa-math", "torch-sdpa-cpu-flash", "flex", "aten-flash-varlen", "torch-sdpa-cudnn"):
        assert name in out
    assert "unavailable: no CUDA device" in out or "available" in out


def test_capabilities_reasons_name_the_field():
    from reference.case import Case, DType, SequenceSpec

    caps = Capabilities(dtypes=frozenset({DType.FLOAT16}), head_sizes=(64,))
    reasons = caps.reasons(Case(sequences=(SequenceSpec(2),), head_size=8))
    assert any("dtype=bfloat16" in r for r in reasons) and any("head_size=8" in r for r in reasons)


def test_fa4_s_disk_cache_is_switched_on_before_its_module_can_be_imported(monkeypatch):
    """FA4 reads FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED once, when flash_attn.cute is imported, and the
    availability check is what imports it first; a user's own setting is kept."""
    from backends.fa4 import CUTE_CACHE_ENV

    monkeypatch.delenv(CUTE_CACHE_ENV, raising=False)
    for name in ("fa4-varlen", "vllm-fa4-paged"):
        get(name).availability()
    assert os.environ[CUTE_CACHE_ENV] == "1"
    monkeypatch.setenv(CUTE_CACHE_ENV, "0")
    get("fa4-paged").availability()
    assert os.environ[CUTE_CACHE_ENV] == "0"


class Asked(Backend):
    """Counts the availability checks it gets."""
    name = "counts-its-checks"
    checks = 0

    def availability(self):
        Asked.checks += 1
        return None


def test_get_asks_no_backend_whether_it_is_available_and_a_named_listing_asks_those_named():
    """Every backend's check costs a process 1.5 s (torch's varlen check imports torch._dynamo): a worker's get() and
    `attnref fuzz --backend B` ask none, or B alone."""
    spec = ("tests.backends.test_registry:Asked",)
    Asked.checks = 0
    assert get("counts-its-checks", specs=spec).name == "counts-its-checks" and Asked.checks == 0
    (asked,) = listings(specs=spec, names=["counts-its-checks"])
    assert asked.available and Asked.checks == 1
    assert listings(specs=spec, names=["no-such-backend"]) == [] and listings(names=["mutant-lse-base2"]) == []
    code = ("import sys; from backends.registry import get; get('torch-sdpa-math'); "
            "print('torch._dynamo' in sys.modules)")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "False", fresh.stderr
