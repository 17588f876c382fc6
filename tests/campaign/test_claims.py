"""Compile claims (campaign/claims.py): one build per key on a host, at most `slots` builds at once, built markers a
later campaign reads, and locks the OS frees when their process dies."""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

from campaign.claims import WARMUP_S, CompileClaims, built_modules, compile_slots, compile_slots_at

KEY = '["bfloat16", 128]'


def built_keys(keys_root, backend: str) -> set[str]:
    """The compile keys of the modules built over this cache (campaign.claims.built_modules)."""
    return {key for key, _ in built_modules(keys_root, backend)}


def test_a_key_is_built_by_one_holder_at_a_time(tmp_path):
    a = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=2)
    b = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=2)  # another worker of the host
    held = a.claim("fa4-varlen", KEY)
    assert held is not None
    assert b.claim("fa4-varlen", KEY) is None  # it defers instead of building the same module
    assert b.claim("fa4-paged", KEY) is not None  # another backend's key is another module
    held.done(built=True)
    assert b.is_built("fa4-varlen", KEY) and built_keys(tmp_path / "keys", "fa4-varlen") == {KEY}
    assert built_keys(tmp_path / "keys", "flashinfer-decode") == set()


def test_backends_that_share_modules_take_one_lock_per_variant_and_keep_their_own_markers(tmp_path):
    """Backend.jit_module_space: FlashInfer's tensor-core decode plans the fa2 prefill modules, so one build of a
    variant holds the lock for both backends; each still marks what it ran itself."""
    from backends.registry import get

    a = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=3)
    b = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=3)
    tc, fa2 = get("flashinfer-decode-tc"), get("flashinfer-prefill-fa2")
    assert tc.jit_module_space == fa2.jit_module_space is not None
    assert get("flashinfer-decode").jit_module_space is None and get("flashinfer-prefill-fa3").jit_module_space is None
    variant = '["variant", "bfloat16", "auto", 128, 128, false, false, false, false]'
    held = a.claim(tc.name, variant, covers=KEY, space=tc.jit_module_space)
    assert held is not None
    assert b.claim(fa2.name, variant, covers=KEY, space=fa2.jit_module_space) is None  # the same module: it waits
    free = b.claim(fa2.name, variant, covers=KEY)  # without the shared space the lock was per backend
    assert free is not None
    free.done(built=False)
    held.done(built=True)
    assert a.is_built(tc.name, variant) and not b.is_built(fa2.name, variant)  # markers stay per backend
    assert built_keys(tmp_path / "keys", tc.name) == {KEY} and built_keys(tmp_path / "keys", fa2.name) == set()


def test_builds_and_loads_past_the_slots_wait_and_a_failed_build_marks_nothing(tmp_path):
    claims = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=2)
    first = claims.claim("jit", '["a"]')
    load = claims.slot_only()  # a built key loaded into another process takes a slot, no key lock
    assert load is not None and load.key_fd is None
    assert claims.claim("jit", '["b"]') is None and claims.slot_only() is None  # both slots are busy
    load.done(built=True)  # a load marks nothing
    first.done(built=False)  # a crashed first call builds nothing
    assert built_keys(tmp_path / "keys", "jit") == set() and claims.claim("jit", '["b"]') is not None


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


def test_the_warm_up_builds_with_more_slots_than_the_campaign_s_share():
    """Nothing is built in a cold campaign's first minutes: 5 of 16 workers may build then, 3 (the default 0.2) after;
    a larger share holds throughout."""
    assert compile_slots_at(0.0, 0.2, 16) == compile_slots_at(WARMUP_S - 1, 0.2, 16) == 5
    assert compile_slots_at(WARMUP_S, 0.2, 16) == 3
    assert compile_slots_at(0.0, 0.5, 16) == compile_slots_at(WARMUP_S, 0.5, 16) == 8


def test_a_task_s_slots_bound_the_worker_s_first_calls(tmp_path, monkeypatch):
    """The driver stamps each task with the slots of the moment (campaign.engine): a worker started with two slots
    builds in the second one while the first is busy, but not once the budget has fallen to one; its case goes back to
    wait instead."""
    from backends.registry import get
    from campaign.compiles import key_text
    from campaign.tasks import Task, TaskKind, WorkerConfig
    from campaign.worker import Worker
    from fuzz.strategies import Limits, compile_key
    from tests.repro_scripts import drawn_cases

    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    spec = ("tests.campaign.fake_jit:backends",)
    backend = get("test-fake-jit", specs=spec)
    case = drawn_cases(backend.caps, Limits(max_sequences=2, max_context=16, max_query=4), 1)[0]
    sent: list[dict] = []
    worker = Worker(WorkerConfig(specs=spec, cache_dir=str(tmp_path / "cache"), compile_slots=2,
                                 slots_dir=str(tmp_path / "slots")), send=sent.append)
    busy = worker.claims.slot_only()  # another worker's build holds the first slot
    key = key_text(compile_key(case, backend.compiled_per, backend.compiled_features))
    task = Task(TaskKind.DEFERRED, backend.name, key=key, cases=(case.to_json(),),
                wheres=({"shard": 1, "index": 1, "shard_size": 1},), needs_slot=True, slots=1)
    worker.run(task)
    assert [m["type"] for m in sent] == ["deferred", "done"] and sent[0]["returned"]
    sent.clear()
    worker.run(replace(task, slots=2))
    rows = [m["row"] for m in sent if m["type"] == "row"]
    assert [r["verdict"] for r in rows] == ["pass"] and rows[0]["first_of_key"]
    busy.done(built=False)


def test_a_finer_variant_of_a_built_key_is_a_module_of_its_own(tmp_path):
    """FA4 builds per attention type, GQA ratio and page size too (Backend.jit_variant): a case of a compile key the
    worker has run, but of another variant, still takes a slot; a case of a variant it ran does not."""
    from backends.registry import get
    from campaign.compiles import key_text
    from campaign.tasks import WorkerConfig
    from campaign.worker import Worker
    from fuzz.strategies import Limits, compile_key
    from tests.repro_scripts import drawn_cases

    backend = get("fa4-varlen")
    key = lambda c: compile_key(c, backend.compiled_per, backend.compiled_features)  # noqa: E731
    drawn = drawn_cases(backend.caps, Limits(max_sequences=3, max_context=24, max_query=6), 200)
    a, b = next((a, b) for a in drawn for b in drawn
                if key(a) == key(b) and backend.jit_variant(a) != backend.jit_variant(b))
    worker = Worker(WorkerConfig(cache_dir=str(tmp_path), compile_slots=1, slots_dir=str(tmp_path / "slots")),
                    send=lambda message: None)
    waits, claim = worker._defers(backend, a, frozenset())
    assert waits is None and claim is not None and claim.slot_fd is not None  # a build: the key's lock and the slot
    claim.done(built=True)
    worker._units.add((backend.name, worker._module(backend, a)[1]))  # as a first call does
    busy = worker.claims.slot_only()
    assert worker._defers(backend, a, frozenset()) == (None, None)  # its module is in this process
    module_a, module_b = worker._module(backend, a)[1], worker._module(backend, b)[1]
    # built per compile key, not per module: b still waits for a slot, and names its own module to the driver
    assert worker._defers(backend, b, frozenset({key_text(key(a)), module_a})) == ((key_text(key(b)), module_b), None)
    busy.done(built=False)
    assert built_keys(worker.claims.keys_root, backend.name) == {key_text(key(a))}  # markers name the compile key
    assert built_modules(worker.claims.keys_root, backend.name) == {(key_text(key(a)), module_a)}  # and the module


def test_only_a_first_call_that_returned_marks_its_module_built():
    """A refused, crashed or hung first call may have built nothing: were its key marked built, other workers would
    load it without a claim, and several would wait out one build on the library's own lock outside the slots."""
    from campaign.claims import built_by

    assert all(built_by(v) for v in ("pass", "mismatch", "nan", "contract", "blind"))
    assert not any(built_by(v) for v in ("crash", "unsupported", "timeout", None))


def test_a_running_task_s_claims_follow_the_budget_the_driver_publishes(tmp_path):
    """A task's own slot count is the one of the moment it went out; a generation task may build for minutes (with the
    budget at one slot, FlashInfer workers still ran four builds at once on an H200: campaigns/
    jit-untold-budget-h200-2026-11-27.md). The driver's current count (campaign.claims.write_budget) bounds it."""
    from campaign.claims import write_budget

    claims = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=3)
    first = claims.slot_only()
    second = claims.slot_only()
    assert first is not None and second is not None  # the task's 3 slots, 2 taken
    write_budget(tmp_path / "slots", 2)
    assert claims.limit() == 2 and claims.slot_only() is None and claims.claim("b", "k") is None
    write_budget(tmp_path / "slots", 5)
    assert claims.limit() == 3 and claims.slot_only() is not None  # never above the task's own count
    (tmp_path / "slots" / "budget").write_text("")  # unreadable: the task's count
    assert claims.limit() == 3


def test_the_driver_publishes_the_budget_when_it_changes(tmp_path):
    from campaign.engine import CampaignConfig, Driver
    from campaign.tasks import WorkerConfig
    from tests.campaign.test_compiles import SPEC, _Pool

    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], seconds=600, specs=SPEC, progress=False)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=5, specs=SPEC, slots_dir=str(tmp_path / "slots")))
    driver.budget.adjust_s = 0.0
    budget = tmp_path / "slots" / "budget"
    assert driver._compile_budget(0.0) == 5 and budget.read_text() == "5"
    assert driver._compile_budget(WARMUP_S) == 2 and budget.read_text() == "2"  # the warm-up evaluated nothing
    now = time.time()
    for s in range(60):  # a minute of every worker building
        driver.budget.record({"phase": "generate", "t": now - 59 + s, "kernel_s": 1.0, "compile_s": 1.0})
    assert driver._compile_budget(WARMUP_S + 60) == 1 and budget.read_text() == "1"


def test_a_compile_task_waiting_for_a_slot_gets_the_next_one_before_generation_s_claims(tmp_path):
    """Generation's first calls try a slot at every draw, a compile task once: they won every freed slot, and on an
    H200 fa4-varlen's first calls left fa4-paged none from 84 s on (campaigns/jit-untold-late-builds-h200-2026-11-27.md).
    A starved backend's compile task now waits for the next free slot, and no generation claim takes one meanwhile."""
    import threading

    claims = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=1)
    held = claims.claim("varlen", "k1")
    assert held is not None and not claims.someone_waits()
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(claims.claim("paged", "k2", wait_s=10.0)))
    waiter.start()
    for _ in range(200):
        if claims.someone_waits():
            break
        time.sleep(0.01)
    assert claims.someone_waits()
    held.done(built=True)  # the slot frees: generation's claims still take none while the compile task waits
    assert claims.claim("varlen", "k3") is None and claims.slot_only() is None
    waiter.join(5.0)
    assert got and got[0] is not None and got[0].backend == "paged"
    assert not claims.someone_waits() and claims.slot_only() is None  # the compile task holds the one slot
    got[0].done(built=True)
    assert claims.slot_only() is not None


def test_a_compile_task_waits_no_longer_than_it_was_told(tmp_path):
    claims = CompileClaims(tmp_path / "keys", tmp_path / "slots", slots=1)
    held = claims.slot_only()
    started = time.monotonic()
    assert held is not None and claims.claim("paged", "k", wait_s=0.3) is None
    assert 0.3 <= time.monotonic() - started < 3.0
    assert not claims.someone_waits() and claims.claim("paged", "k") is None  # its key lock went with it: no slot
    held.done(built=False)
    assert claims.claim("paged", "k") is not None
