"""Compile claims (campaign/claims.py): one build per key on a host, at most `slots` builds at once, built markers a
later campaign reads, and locks the OS frees when their process dies."""
from __future__ import annotations

import subprocess
import sys
import time

from campaign.claims import CompileClaims, compile_slots

KEY = '["bfloat16", 128]'


def test_a_key_is_built_by_one_holder_at_a_time(tmp_path):
    a = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=2)
    b = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=2)  # another worker of the host
    held = a.claim("fa4-varlen", KEY)
    assert held is not None
    assert b.claim("fa4-varlen", KEY) is None  # it defers instead of building the same module
    assert b.claim("fa4-paged", KEY) is not None  # another backend's key is another module
    held.done(built=True)
    assert b.is_built("fa4-varlen", KEY) and b.built_keys("fa4-varlen") == {KEY}
    assert b.built_keys("flashinfer-decode") == set()


def test_builds_and_loads_past_the_slots_wait_and_a_failed_build_marks_nothing(tmp_path):
    claims = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=2)
    first = claims.claim("jit", '["a"]')
    load = claims.slot_only()  # a built key loaded into another process takes a slot, no key lock
    assert load is not None and load.key_fd is None
    assert claims.claim("jit", '["b"]') is None and claims.slot_only() is None  # both slots are busy
    load.done(built=True)  # a load marks nothing
    first.done(built=False)  # a crashed first call builds nothing
    assert claims.built_keys("jit") == set() and claims.claim("jit", '["b"]') is not None


def test_a_dead_builder_frees_its_key_and_slot(tmp_path):
    code = ("import sys, time; from campaign.claims import CompileClaims; "
            f"c = CompileClaims(sys.argv[1] + '/keys', sys.argv[1] + '/slots', 1).claim('jit', {KEY!r}); "
            "print('held' if c else 'none', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        claims = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=1)
        assert claims.claim("jit", KEY) is None
        assert claims.slot_only() is None
    finally:
        proc.kill()
        proc.wait()
    assert claims.claim("jit", KEY) is not None


def test_a_compile_task_waits_out_another_build_of_its_key(tmp_path):
    a = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=1)
    b = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=1)
    held = a.claim("jit", KEY)
    assert b.wait_claim("jit", KEY, until=time.time() + 0.3, poll=0.05) is None  # still held at its deadline
    held.done(built=True)
    assert b.wait_claim("jit", KEY, poll=0.05) is None  # built meanwhile: nothing left to build
    fresh = b.wait_claim("jit", '["c"]', poll=0.05)
    assert fresh is not None and fresh.slot_fd is None


def test_slots_are_the_compile_share_of_the_workers():
    assert compile_slots(0.3, 16) == 5 and compile_slots(0.3, 2) == 1 and compile_slots(1.0, 8) == 8
