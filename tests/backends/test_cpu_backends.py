"""Every backend available on this machine against the oracle, on hypothesis-drawn cases."""
from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import assume, given, settings

from backends.registry import listings
from fuzz.compare import Verdict, evaluate
from fuzz.ledger import known_for
from fuzz.strategies import Limits, cases

SLOW = {"flex-compiled": "inductor compiles each new variant (tens of seconds on 2 CPU cores); ATTNREF_SLOW=1 runs it"}
def test_backend_agrees_with_the_oracle(attnref_backend):
    backend = attnref_backend
    if backend.name in SLOW and not os.environ.get("ATTNREF_SLOW"):
        pytest.skip(SLOW[backend.name])
    warnings.simplefilter("ignore")

    @settings(max_examples=30)
    @given(cases(backend.caps, Limits(max_context=48, max_query=12)))
    def check(case):
        known = known_for(backend.name, case)
        assume(known is None)  # known upstream failures are the ledger's business (tests/fuzz)
        row = evaluate(backend, case).row
        assert not Verdict(row["verdict"]).is_failure, (row["verdict"], row.get("message"), case.to_json())

    check()


def test_unavailable_backends_say_why():
    for x in listings():
        if not x.available:
            assert isinstance(x.unavailable, str) and x.unavailable
