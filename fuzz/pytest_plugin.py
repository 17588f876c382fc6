"""pytest plugin (entry point `pytest11`): choose backends and budgets from the command line.

    pytest --attnref-backend torch-sdpa-math --attnref-examples 200

A test that takes the `attnref_backend` argument is run once per selected backend (default: every
backend available here); `attnref_examples` is the per-test example budget. Hypothesis' example
database lives under `.attnref/` so shrunk failures replay first on the next run.
"""
from __future__ import annotations

import os


def pytest_addoption(parser) -> None:
    group = parser.getgroup("attnref")
    group.addoption("--attnref-backend", action="append", default=[], help="backend name (repeatable)")
    group.addoption("--attnref-examples", type=int, default=None, help="hypothesis examples per test")


def pytest_configure(config) -> None:
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    os.makedirs(".attnref", exist_ok=True)
    examples = config.getoption("--attnref-examples")
    if os.environ.get("ATTNREF_PROFILE", "dev") != "ci":
        current = settings.default
        settings.register_profile("attnref-cli", parent=current,
                                  database=DirectoryBasedExampleDatabase(".attnref/examples"),
                                  **({"max_examples": examples} if examples else {}))
        settings.load_profile("attnref-cli")
    elif examples:
        settings.register_profile("attnref-cli", parent=settings.default, max_examples=examples)
        settings.load_profile("attnref-cli")


def pytest_generate_tests(metafunc) -> None:
    if "attnref_backend" not in metafunc.fixturenames:
        return
    from backends.registry import listings

    chosen = metafunc.config.getoption("--attnref-backend")
    backends = [x.backend for x in listings(include_mutants=True) if x.available and
                (x.backend.name in chosen if chosen else not x.backend.name.startswith("mutant-"))]
    metafunc.parametrize("attnref_backend", backends, ids=[b.name for b in backends])
