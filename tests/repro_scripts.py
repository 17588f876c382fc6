"""Shared by the repro-script tests: load a written script as a namespace, draw cases of a declaration, and call a
script's kernel as its main() does (on the CPU, against a stand-in library)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from fuzz.strategies import Limits, cases


def load(text: str, device: str | None = None) -> dict:
    """The script's module namespace (not run as __main__); `device` replaces its DEVICE."""
    namespace = {"__name__": "repro"}
    exec(compile(text, "repro.py", "exec"), namespace)
    if device is not None:
        namespace["DEVICE"] = device
    return namespace


def drawn_cases(caps, limits: Limits, n: int) -> list:
    """n cases drawn from `caps`, the same however often it runs: no example database, and derandomized (random draws
    left a test asking for a dynamically scaled case among 12 without one in 2 runs of 21)."""
    drawn = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(cases(caps, limits))
    def collect(case):
        drawn.append(case)

    collect()
    return drawn


def call_kernel(ns: dict):
    """The script's kernel on its drawn inputs, stored first when the cache is quantized, as main() hands them."""
    q, ks, vs = ns["draw_inputs"]()
    return ns["kernel"](*(ns["store"](q, ks, vs) if "store" in ns else (q, ks, vs)))
