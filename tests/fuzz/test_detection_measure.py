"""benchmarks/detection.py takes the first kill when the failing row is judged, as a campaign records it: hypothesis'
replay of the failing example before it stops is neither an example nor part of the seconds."""
from __future__ import annotations

from backends.naive import NaivePaged, mutants
from benchmarks.detection import first_kill


def test_a_kill_on_the_first_example_counts_one_example():
    lse = next(m for m in mutants() if m.name == "mutant-lse-base2")  # wrong on every case, the simplest first
    for seed in range(2):
        examples, seconds, verdict, _ = first_kill(lse, seed, budget=5)
        assert examples == 1 and verdict == "mismatch" and seconds > 0


def test_a_correct_backend_is_never_killed():
    assert first_kill(NaivePaged(), 0, budget=5) is None
