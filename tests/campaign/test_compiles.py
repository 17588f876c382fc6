"""Compiles off the critical path (campaign/compiles.py, campaign/claims.py): a worker defers a case whose JIT module
another worker builds, or drawn while every compile slot is busy; the driver hands deferred cases out once their key
is built (or as compile tasks once generation is over); every example still gets exactly one row, every key is built
once, and a second campaign over the same cache starts with the first one's keys built."""
from __future__ import annotations

import json
import time
from collections import Counter

import pandas as pd
import pytest

from campaign.compiles import Backlog
from campaign.engine import CampaignConfig, run_campaign
from campaign.scheduler import Scheduler
from campaign.tasks import TaskKind
from campaign.worker import SPENT
from benchmarks.jit_campaign import shard_time, task_time
from tests.campaign.fake_jit import COMPILE_S, VARIANT_COMPILE_S

SPEC = ("tests.campaign.fake_jit:backends",)


def test_built_keys_go_first_and_unbuilt_ones_only_once_generation_is_over():
    s = Scheduler(["jit"], examples=4, shard_size=2)
    for wid in range(3):
        s.add_worker(wid)
    s.defer("jit", "[\"a\"]", "case-a1", {"shard": 0, "index": 1, "shard_size": 2})
    s.defer("jit", "[\"b\"]", "case-b1", {"shard": 0, "index": 2, "shard_size": 2})
    s.key_built("jit", "[\"b\"]")
    kinds = sorted(((t.kind, t.key) for _, t in s.schedule()), key=str)
    # while generation has work, workers build keys where they draw them: no compile task for "a"
    assert kinds == sorted([(TaskKind.DEFERRED, "[\"b\"]"), (TaskKind.GENERATE, ""), (TaskKind.GENERATE, "")], key=str)
    generate = next(t for t in s.running.values() if t.kind == TaskKind.GENERATE)
    assert generate.built == ("[\"b\"]",)  # workers learn which keys exist
    for wid, t in list(s.running.items()):
        if t.kind == TaskKind.GENERATE:
            s.example_done("jit", t.shard, t.size)
        s.task_done(wid)
    assert [(t.kind, t.key) for _, t in s.schedule()] == [(TaskKind.DEFERRED, "[\"a\"]")]  # generation over
    assert not s.finished


def test_builds_alternate_a_new_key_and_the_largest_backlog_the_backend_with_fewest_builds_first():
    """Largest backlog alone built 267-280 FA4 modules within 10-12 of its 2,304 keys on an H200, and 3 keys of one vLLM
    backend against 93 of the other (campaigns/jit-untold-side-by-side-h200-2026-11-27.md)."""
    b = Backlog()
    where = {"shard": 1, "index": 1, "shard_size": 9}
    b.mark_built("fa4", "[\"k1\"]", "k1-v1")
    for i in range(40):  # focused shards of the built key feed a new variant of it
        b.defer("fa4", "[\"k1\"]", f"v2-{i}", where, unit="k1-v2")
    for i in range(2):  # a tour's two cases of a key nothing is built of
        b.defer("fa4", "[\"k2\"]", f"k2-{i}", where, unit="k2-v1")
    for i in range(10):
        b.defer("fa4", "[\"k3\"]", f"k3-{i}", where, unit="k3-v1")
    handed = [b.take(built=False)[2] for _ in range(3)]
    assert handed == ["k3-v1", "k1-v2", "k2-v1"], handed  # a new key, the largest backlog, a new key
    # two backends: the one with fewer modules built gets the next build, though its backlog is smaller
    b = Backlog()
    for i in range(5):
        b.mark_built("busy", f"[\"b{i}\"]")
    for i in range(64):
        b.defer("busy", "[\"b9\"]", f"b9-{i}", where)
    b.defer("starved", "[\"s1\"]", "s1-0", where)
    assert [b.take(built=False)[0] for _ in range(2)] == ["starved", "busy"]
    # full backlogs: the one that dropped most cases first (a built key's prefill variant behind its decodes)
    b = Backlog(per_module=4)
    b.mark_built("layer", "[\"k\"]", "decode")
    b.mark_built("layer", "[\"j\"]", "decode-j")
    for i in range(4):
        b.defer("layer", "[\"j\"]", f"j-{i}", where, unit="prefill-j")
    for i in range(9):
        b.defer("layer", "[\"k\"]", f"k-{i}", where, unit="prefill")
    b.builds_handed = 1  # a rows-soon turn
    assert b.take(built=False)[2] == "prefill"


def test_a_new_key_with_values_no_built_key_has_is_built_before_a_larger_backlog():
    """By backlog alone an H200's untold FlashInfer campaign built 27 of 864 keys in 10 minutes and never built
    decode-tc's fp8 caches or soft-cap (campaigns/jit-untold-each-alone-h200-2026-11-27.md)."""
    from campaign.compiles import key_text, key_values

    assert key_values(key_text(("float16", (64, 64), "fp8_e4m3", "soft_cap"))) == {
        "float16", "[64, 64]", "fp8_e4m3", "soft_cap"}
    b = Backlog()
    where = {"shard": 1, "index": 1, "shard_size": 9}
    b.mark_built("fi", key_text(("bfloat16", (64, 64), "auto")))
    b.mark_built("fi", key_text(("bfloat16", (64, 64), "auto", "window")))
    known = key_text(("float16", (64, 64), "auto"))  # one value new (float16), the larger backlog
    fresh = key_text(("bfloat16", (64, 64), "fp8_e4m3", "soft_cap"))  # two values new
    for i in range(50):
        b.defer("fi", known, f"k-{i}", where)
    for i in range(3):
        b.defer("fi", fresh, f"f-{i}", where)
    assert [b.take(built=False)[1] for _ in range(2)] == [fresh, known]  # then a rows-soon turn: the larger backlog


def test_built_keys_cases_follow_the_worker_that_has_their_module_loaded():
    """A first call costs seconds in each process (FA4: 2-5 s on an H100): a built key's few waiting cases go to the
    worker that ran the key, another worker takes them only once LOAD_BATCH wait or nobody has the key loaded."""
    from campaign.compiles import LOAD_BATCH

    s = Scheduler(["jit"], examples=None, shard_size=10)
    for wid in range(2):
        s.add_worker(wid)
    s.key_built("jit", "k", wid=1)
    for i in range(3):
        s.defer("jit", "k", f"case-{i}", {"shard": 0, "index": i + 1, "shard_size": 10})
    s.idle = [0]  # worker 1 is busy
    assert [t.kind for _, t in s.schedule()] == [TaskKind.GENERATE]
    s.idle.append(1)
    assert [(w, t.kind, len(t.cases)) for w, t in s.schedule()] == [(1, TaskKind.DEFERRED, 3)]
    for i in range(LOAD_BATCH):
        s.defer("jit", "k", f"more-{i}", {"shard": 1, "index": i + 1, "shard_size": 10})
    s.task_done(0)
    assert [(w, t.kind) for w, t in s.schedule()] == [(0, TaskKind.DEFERRED)]  # enough cases to pay for a load
    s.worker_lost(1)
    s.defer("jit", "k", "last", {"shard": 2, "index": 1, "shard_size": 10})
    s.task_done(0)
    assert [(w, t.kind) for w, t in s.schedule()] == [(0, TaskKind.DEFERRED)]  # nobody else has it loaded now


def test_a_worker_s_new_shards_focus_on_keys_it_has_loaded_two_per_whole_space_one():
    from campaign.focus import FOCUSED_PER_WHOLE

    s = Scheduler(["jit"], examples=None, shard_size=5)
    s.add_worker(0)
    keys = []
    for _ in range(12):
        (wid, task), = s.schedule()
        keys.append(task.key)
        if task.shard == 1:
            s.key_built("jit", "k1", wid=0)
            s.key_built("jit", "k2", wid=0)
        s.example_done("jit", task.shard, task.size)
        s.task_done(wid)
    # the warm-up, the whole space; then up to FOCUSED_PER_WHOLE focused shards per whole-space one (counting one
    # ahead), the least focused key first
    assert FOCUSED_PER_WHOLE == 2
    assert keys == ["", "", "k1", "k2", "k1", "k2", "", "k1", "k2", "", "k1", "k2"]
    assert s.focus_of("jit", 2) == ("k1", False, 0) and s.focus_of("jit", 6) == ("", False, 0)  # shrinks draw as their shard did


def test_a_compile_task_runs_beside_generation_in_each_free_slot():
    """While generation goes on, as many unbuilt keys go out as compile tasks as there are compile slots; a task that
    found no free slot gives its cases back, and none goes out again before some first call ends."""
    s = Scheduler(["jit"], examples=None, shard_size=10, compile_slots=1)
    for wid in range(3):
        s.add_worker(wid)
    s.defer("jit", "a", "case-a", {"shard": 0, "index": 1, "shard_size": 10})
    s.defer("jit", "b", "case-b", {"shard": 0, "index": 2, "shard_size": 10})
    out = {wid: t for wid, t in s.schedule()}
    compiles = [(w, t) for w, t in out.items() if t.kind == TaskKind.DEFERRED]
    assert len(compiles) == 1 and compiles[0][1].needs_slot
    assert sorted(t.kind.value for t in out.values()) == ["deferred", "generate", "generate"]
    (wid, task), = compiles
    s.defer("jit", task.key, task.cases[0], task.wheres[0], returned=True)  # every slot was busy
    s.task_done(wid)
    assert [t.kind for _, t in s.schedule()] == [TaskKind.GENERATE]
    assert s.backlog.deferred["jit", task.key] == 1  # given back, not drawn again
    s.first_call_done()
    s.task_done(wid)
    assert [(t.kind, t.needs_slot) for _, t in s.schedule()] == [(TaskKind.DEFERRED, True)]


def test_after_the_warm_up_fewer_compile_tasks_go_out(tmp_path):
    """The driver's compile budget (campaign.claims.compile_slots_at): 16 workers at the default share build in 5 slots
    (4 compile tasks beside generation, one slot kept for loads) during the warm-up and in 3 (2 compile tasks) after,
    while evaluation keeps above its floor."""
    from campaign.claims import WARMUP_S
    from campaign.engine import Driver
    from campaign.tasks import WorkerConfig

    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], seconds=600, specs=SPEC, progress=False)
    driver = Driver(cfg, _Pool(), WorkerConfig(compile_slots=5, specs=SPEC))
    s = driver.scheduler
    for wid in range(16):
        s.add_worker(wid)
    for n in range(12):
        s.defer("test-fake-jit", f"k{n}", f"case-{n}", {"shard": 0, "index": n + 1, "shard_size": 100})

    def compile_tasks(elapsed):
        slots = driver._compile_budget(elapsed)
        busy = [t for _, t in s.schedule() if t.kind == TaskKind.DEFERRED and t.needs_slot]
        for wid in list(s.running):
            s.task_done(wid)
        return len(busy), slots

    assert compile_tasks(0.0) == (4, 5)
    now = time.time()
    for w in range(16):  # the warm-up's last minute all evaluation: the budget stays at its ceiling
        for t in range(60):
            driver.budget.record({"phase": "generate", "t": now - 59 + t, "oracle_s": 1.0})
    assert compile_tasks(WARMUP_S) == (2, 3)


class _Pool:
    """16 worker slots that start no process: each is ready at once, and the tasks handed out are kept."""

    slots = 16

    def __init__(self) -> None:
        self.assigned, self.started = [], []

    def start(self, wid, slot):
        self.started.append(wid)

    def assign(self, wid, task, deadline):
        self.assigned.append(task)

    def poll(self, timeout):
        ready, self.started = [("msg", wid, {"type": "ready"}) for wid in self.started], []
        return ready

    def stop(self, wid): ...
    def kill(self, wid): ...
    def close(self): ...


@pytest.mark.parametrize("warmup_s, slots", [(600.0, 5), (0.0, 3)])
def test_each_task_goes_out_with_the_slots_of_its_moment(tmp_path, monkeypatch, warmup_s, slots):
    """The driver stamps every task it hands out with the compile slots of that moment, which bound its worker's first
    calls (test_claims: test_a_task_s_slots_bound_the_worker_s_first_calls)."""
    import time

    from campaign import claims
    from campaign.engine import Driver
    from campaign.tasks import WorkerConfig

    monkeypatch.setattr(claims, "WARMUP_S", warmup_s)
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], seconds=600, specs=SPEC, progress=False,
                         example_timeout=0.2)
    pool = _Pool()
    driver = Driver(cfg, pool, WorkerConfig(compile_slots=5, specs=SPEC))
    driver._loop(time.time() + 0.5, {"signal": None})
    assert len(pool.assigned) == 16 and {t.slots for t in pool.assigned} == {slots}


def test_waiting_cases_follow_their_module_and_given_back_ones_wait_for_a_first_call():
    """A backend with variants finer than its compile key (Backend.jit_variant): a waiting case goes to a worker that
    has its module loaded, not one that ran another module of the key, and cases given back for want of a slot stay
    put until some first call ends. Routed per key, the cases went back and forth between the workers up to 142,000
    times per backend in ten minutes on an H100 (campaigns/jit-untold-h100-2026-11-26.md)."""
    s = Scheduler(["jit"], examples=None, shard_size=10, compile_slots=2)
    s.add_worker(0)
    s.key_built("jit", "k", wid=0, unit="k/v1")
    s.defer("jit", "k", "case-v2", {"shard": 1, "index": 1, "shard_size": 10}, unit="k/v2")
    s.defer("jit", "k", "case-v1", {"shard": 1, "index": 2, "shard_size": 10}, unit="k/v1")
    (_, task), = s.schedule()
    assert (task.kind, task.unit, task.cases, task.needs_slot) == (TaskKind.DEFERRED, "k/v1", ("case-v1",), True)
    s.task_done(0)
    (_, task), = s.schedule()  # v2 is built nowhere: a compile task in a slot
    assert (task.kind, task.unit, task.key) == (TaskKind.DEFERRED, "k/v2", "k") and 0 in s.compiling
    s.defer("jit", task.key, task.cases[0], task.wheres[0], returned=True, unit=task.unit)  # no free slot
    s.task_done(0)
    s.slots_busy = False  # as if a slot freed without a first call: the given-back module still waits
    (_, task), = s.schedule()
    assert task.kind == TaskKind.GENERATE
    s.task_done(0)
    s.first_call_done()
    (_, task), = s.schedule()
    assert (task.kind, task.unit) == (TaskKind.DEFERRED, "k/v2")
    assert s.backlog.record(["jit"])["jit"]["built"] == ["k"] and s.backlog.deferred["jit", "k"] == 2


def test_tours_draw_each_declared_key_once_then_the_whole_space_while_few_keys_wait():
    from campaign.focus import TOUR_SIZE

    s = Scheduler(["jit"], examples=None, shard_size=50, declared={"jit": ["k1", "k2", "k3"]}, compile_slots=1)
    s.add_worker(0)
    s.key_drawn("jit", "k2")  # a row of k2 came back: no tour of it

    def next_shards(n: int) -> list[tuple[str, int]]:
        seen = []
        for _ in range(n):
            (wid, task), = s.schedule()
            assert task.kind == TaskKind.GENERATE
            seen.append((task.key, task.size))
            s.example_done("jit", task.shard, task.size)
            s.task_done(wid)
        return seen

    assert next_shards(4) == [("", 20), ("k1", TOUR_SIZE), ("k3", TOUR_SIZE), ("", 50)]
    s.key_built("jit", "k1", wid=0)
    # FOCUSED_PER_WHOLE per other shard (tours count), one ahead; then, no unbuilt key waiting, the whole space
    assert [k for k, _ in next_shards(9)] == ["k1"] * 8 + [""]
    s.defer("jit", "k3", "case", {"shard": 1, "index": 1, "shard_size": 4}, returned=True)  # waits, slots busy
    assert [k for k, _ in next_shards(3)] == ["k1", "k1", "k1"]  # a key waits for the one slot: no more draws


def test_a_worker_with_no_key_loaded_draws_a_built_key_while_builds_are_queued():
    """Whole-space draws mostly wait when few keys are built: a worker that has none of the backend's keys loaded
    starts on a built one instead, the least focused, while at least a slot's worth of unbuilt modules wait; with
    fewer waiting, the whole space again (it finds the keys to build next)."""
    s = Scheduler(["jit"], examples=None, shard_size=50, declared={"jit": ["k1", "k2"]}, compile_slots=1)
    for key in ("k1", "k2"):
        s.key_drawn("jit", key)
    s.key_built("jit", "k2", wid=7)  # built by another worker
    s.add_worker(0)
    (_, warmup), = s.schedule()
    s.example_done("jit", warmup.shard, warmup.size)
    s.task_done(0)
    s.defer("jit", "k1", "case", {"shard": 1, "index": 1, "shard_size": 50}, returned=True)  # waits, slots busy
    (_, task), = s.schedule()
    assert task.kind == TaskKind.GENERATE and task.key == "k2" and not task.tour
    s.task_done(0)
    s.key_built("jit", "k1", wid=7)  # nothing waits unbuilt now
    assert s._focus("jit", 0) == ("", False)


def _past_warm_up(compile_slots: int) -> Scheduler:
    """A scheduler of one JIT backend whose two declared keys were drawn, with worker 0 past the warm-up shard."""
    s = Scheduler(["jit"], examples=None, shard_size=50, declared={"jit": ["k1", "k2"]}, compile_slots=compile_slots)
    for key in ("k1", "k2"):
        s.key_drawn("jit", key)
    s.add_worker(0)
    (_, warmup), = s.schedule()
    s.example_done("jit", warmup.shard, warmup.size)
    s.task_done(0)
    return s


def test_a_whole_space_shard_that_stalled_without_a_row_waits_for_the_next_build():
    """Whole-space draws that all waited say the space's new cases wait for modules: the next whole-space shard goes out
    once another module is built, loaded keys meanwhile. Ungated, FlashInfer's untold backends ran 858-3,450 such
    shards in ten minutes on an H200, 9 rows in all (campaigns/jit-untold-flashinfer-whole-space-h200-2026-11-28.md)."""
    s = _past_warm_up(compile_slots=1)
    s.key_built("jit", "k1", wid=0)
    first = []
    while not first or first[-1] != "":  # FOCUSED_PER_WHOLE focused shards of k1, then the whole space
        (_, task), = s.schedule()
        first.append(task.key)
        if task.key:
            s.example_done("jit", task.shard, task.size)
            s.task_done(0)
    assert first == ["k1", "k1", ""]
    for index in range(1, 9):  # the whole-space shard's draws all waited (their example numbers are used), no row
        s.defer("jit", "k2", f"case {index}", {"shard": task.shard, "index": index, "shard_size": 50})
    s.task_done(0, stalled=True, rows=0)
    (_, build), = s.schedule()  # k2's build takes its waiting cases: no unbuilt module waits now
    assert (build.kind, build.key, len(build.cases)) == (TaskKind.DEFERRED, "k2", 8)
    s.task_done(0)  # (not built: the next one would be tried later)
    keys = []
    for _ in range(6):  # FOCUSED_PER_WHOLE would give every third shard to the whole space
        (_, task), = s.schedule()
        keys.append(task.key)
        s.example_done("jit", task.shard, task.size)
        s.task_done(0)
    assert keys == ["k1"] * 6
    s.key_built("jit", "k2", wid=7)  # a module more: the whole space is due again
    (_, whole), = s.schedule()
    assert whole.key == ""
    s.example_done("jit", whole.shard, 1)  # a row, then its draws waited: the space still gives rows, no gate
    s.task_done(0, stalled=True, rows=1)
    (_, task), = s.schedule()
    assert task.key == ""


def test_a_backend_waiting_for_its_first_build_leaves_its_workers_idle_or_to_another_backend():
    """Before any module of a backend is built, once a whole-space shard stalled without a row, its next shards could
    only draw cases that wait: while a first call runs (its own, or another backend's holding the slot), a worker
    asking for work takes another backend's, or none (its core goes to the build). Without a first call running the
    whole space goes out as before, so a campaign whose builds fail still draws."""
    s = Scheduler(["jit", "other"], examples=None, shard_size=50, declared={"jit": ["k1"], "other": ["o1"]},
                  compile_slots=1)
    s.key_drawn("jit", "k1")
    s.key_drawn("other", "o1")
    s.key_built("other", "o1", wid=5)  # another backend has a built module (loaded in some other worker)
    s.add_worker(0)
    while True:  # the warm-up shards, other's shards, until jit's whole space: nothing built, nothing known to wait
        (_, whole), = s.schedule()
        if whole.backend == "jit" and whole.shard > 0:
            break
        s.example_done(whole.backend, whole.shard, whole.size)
        s.task_done(0)
    assert (whole.kind, whole.key, whole.tour) == (TaskKind.GENERATE, "", False)
    for index in range(1, 9):
        s.defer("jit", "k1", f"case {index}", {"shard": whole.shard, "index": index, "shard_size": 50})
    s.task_done(0, stalled=True, rows=0)
    (_, build), = s.schedule()  # k1's build takes its waiting cases
    assert (build.kind, build.backend, build.key) == (TaskKind.DEFERRED, "jit", "k1")
    s.first_calls_running = {"jit"}
    s.add_worker(1)
    (wid, task), = s.schedule()
    assert (wid, task.backend) == (1, "other")  # not jit's whole space while its first build runs
    s.example_done("other", task.shard, task.size)
    s.task_done(1)
    s.give_up("other", "test: no other backend")
    assert s.schedule() == []  # worker 1 stays idle
    s.first_calls_running = set()  # the first call ended without a module (a build that failed): draw again
    (wid, task), = s.schedule()
    assert (wid, task.backend, task.key, task.tour) == (1, "jit", "", False)
    s.task_done(1, stalled=True, rows=0)
    s.first_calls_running = {"other"}  # a first call of another backend holds the slot jit's build waits for
    assert s.schedule() == []
    s.key_built("jit", "k1", wid=0)  # built: its cases go out again, focused on k1 in the worker that has it
    (wid, task), = s.schedule()
    assert (wid, task.backend) == (1, "jit")


def test_a_worker_held_back_by_first_builds_takes_a_build_in_the_slot_kept_for_loads():
    """While every backend with work waits for its first build, no built module needs the compile slot kept for first
    calls of built modules: a worker the first builds hold back takes another build in it."""
    s = _past_warm_up(compile_slots=2)
    (_, whole), = s.schedule()
    assert whole.key == ""
    for index, key in enumerate(["k1", "k2"] * 4, start=1):
        s.defer("jit", key, f"case {index}", {"shard": whole.shard, "index": index, "shard_size": 50})
    s.task_done(0, stalled=True, rows=0)
    (_, first), = s.schedule()  # one build beside generation: max(1, slots - 1)
    assert first.kind == TaskKind.DEFERRED
    s.first_calls_running = {"jit"}
    s.add_worker(1)
    (wid, second), = s.schedule()  # held back: the other module's build, in the second slot
    assert (wid, second.kind, {first.key, second.key}) == (1, TaskKind.DEFERRED, {"k1", "k2"})
    s.add_worker(2)
    assert s.schedule() == []  # both slots build: the third worker stays idle


def test_tours_take_their_share_of_the_cases_beside_focused_shards_while_keys_are_undrawn():
    """With a key loaded, tours still go out while they are under TOUR_SHARE of the planned cases: one tour per two
    focused shards drew 78 of 1,536 vLLM keys in ten minutes (campaigns/jit-untold-h100-2026-11-26.md)."""
    from campaign.focus import TOUR_SHARE, TOUR_SIZE

    keys = [f"k{i}" for i in range(200)]
    s = Scheduler(["jit"], examples=None, shard_size=100, declared={"jit": keys}, compile_slots=1)
    s.add_worker(0)
    s.key_built("jit", "k0", wid=0)
    s.key_drawn("jit", "k0")
    sizes = []
    for _ in range(60):
        (wid, task), = s.schedule()
        sizes.append((task.key, task.size, task.tour))
        s.example_done("jit", task.shard, task.size)
        s.task_done(wid)
    tours = [k for k, _, tour in sizes if tour]
    planned = sum(n for _, n, _ in sizes)
    assert len(tours) == len(set(tours)) and "k0" not in tours  # each undrawn key once
    assert [k for k, _, tour in sizes if not tour][1:] == ["k0"] * (len(sizes) - len(tours) - 1)  # focused on k0
    # the share holds at each decision: at the end within one focused shard (100 cases) of it
    assert TOUR_SHARE * (planned - 100) <= TOUR_SIZE * len(tours) <= TOUR_SHARE * planned + TOUR_SIZE
    assert len(tours) >= 10 * (len(sizes) - len(tours) - 1)  # ten tours or more per focused shard


def test_a_full_backlog_drops_and_counts():
    backlog = Backlog(per_module=2)
    for i in range(5):
        backlog.defer("jit", "k", f"c{i}", {})
    assert backlog.waiting("jit") == 2 and backlog.dropped("jit") == 3


def _builds(folder, name: str = "builds.log") -> list[tuple[str, float, float]]:
    """(key, start, end) of each sleeping build (or load) of the stand-in JIT backend (tests/campaign/fake_jit.py)."""
    log = folder / name
    return [(k, float(a), float(b)) for k, a, b in (line.split() for line in log.read_text().splitlines())] \
        if log.exists() else []


def test_every_example_gets_one_row_and_some_waited_for_their_module(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], examples=60, workers=3, progress=False,
                         specs=("tests.campaign.fake_jit:backends",), replay_saved=False, cache_dir=str(tmp_path / "c"),
                         limits={"dtypes": ["float32", "bfloat16"], "tiers": ["small"]})
    result = run_campaign(cfg)
    rows = [r for r in result.rows if r.get("phase") == "generate"]
    ids = Counter(r["example_id"] for r in rows)
    assert len(ids) == 60 and max(ids.values()) == 1, ids.most_common(3)
    assert any(r.get("deferred") for r in rows), "no case waited: the test would prove nothing"
    assert all(r.get("compile_key") for r in rows)
    assert result.status == 0
    # where the tasks' seconds went (compile_draws.json `time`, benchmarks/jit_campaign.py): a generation task's parts
    # lie within it, cases were drawn for rows and for waiting, and the waiting cases had tasks of their own
    record = json.loads((tmp_path / "out" / "compile_draws.json").read_text())
    spent = record["time"]["test-fake-jit"]
    assert spent["draw_s"] > 0 and spent["evaluated_s"] > 0 and spent["deferred_draw_s"] > 0, spent
    assert spent["variant_draw_s"] == 0, spent  # one module per key: a key a worker has run is loaded there
    assert sum(spent[k] for k in SPENT) <= spent["generate_task_s"] + 1e-6 and spent["deferred_task_s"] > 0, spent
    (shares,) = task_time(record)
    assert 0 < shares["evaluated"] < shares["in tasks"] <= 100, shares
    # the generation tasks by the shard they drew: each task and each row of a case that did not wait counted once
    shards = shard_time(record)
    assert {t["shard"] for t in shards} <= {"warm-up", "tour", "focused", "focused, borrowed pins", "whole space"}
    assert "warm-up" in {t["shard"] for t in shards} and sum(t["tasks"] for t in shards) == spent["generate_tasks"]
    assert sum(t["rows"] for t in shards) == sum(1 for r in rows if not r.get("deferred")), shards
    # every key was built once, although all three workers drew the simplest case's key first
    builds = _builds(tmp_path)
    per_key = Counter(k for k, _, _ in builds)
    assert len(per_key) >= 3 and max(per_key.values()) == 1, per_key
    # the report's compile-key table: every key that ran, each built by some worker's first call, the waits counted
    from reports.build import build_report
    from reports.compile_keys import built_over_time, compile_key_table

    build_report(tmp_path / "out")
    table = compile_key_table(pd.read_csv(tmp_path / "out" / "results.csv"))
    assert table.equals(pd.read_csv(tmp_path / "out" / "compile_keys.csv"))
    assert set(table["compile_key"]) == {r["compile_key"] for r in rows} and table["examples"].sum() == 60
    assert table["deferred"].sum() == sum(bool(r.get("deferred")) for r in rows) > 0
    assert table["built_s"].notna().all() and (table["built_s"] <= table["first_run_s"] + 1e-6).all()
    (keys,) = built_over_time(table)
    assert keys["built"] == keys["run"] == len(table) and "JIT compile keys" in (tmp_path / "out" / "summary.md").read_text()
    # the declared key space is a coverage dimension: every key that ran is declared; float16 is outside the focus
    from reports.coverage import coverage_map, load_declarations

    cov = coverage_map(pd.read_csv(tmp_path / "out" / "results.csv"), load_declarations(tmp_path / "out"))
    keys_cov = cov[cov["dimension"] == "compile_key"]
    in_focus = keys_cov[keys_cov["in_focus"]]
    assert keys_cov["declared"].all() and set(table["compile_key"]) <= set(in_focus["value"])
    assert not in_focus["value"].str.contains('"float16"').any() and keys_cov["value"].str.contains('"float16"').any()
    assert in_focus["drawn"].sum() == 60 and (in_focus["drawn"] > 0).sum() == len(table)
    # a second campaign over the same cache knows the built keys from its start (campaign.claims' markers), and
    # builds none of them again
    again = run_campaign(CampaignConfig(**{**cfg.__dict__, "out": tmp_path / "again", "seed": 1}))
    record = json.loads((tmp_path / "again" / "compile_draws.json").read_text())
    assert set(table["compile_key"]) <= set(record["backends"]["test-fake-jit"]["built"])
    assert {r["compile_key"] for r in again.rows if r.get("phase") == "generate"} & set(table["compile_key"])
    assert len(_builds(tmp_path)) == len(builds) + sum(1 for r in again.rows if r.get("compile_s", 0) >= COMPILE_S)


def test_builds_hold_the_compile_slots(tmp_path, monkeypatch):
    """A time-bound campaign (generation never ends: builds only in slots, compile tasks beside generation among them):
    the builds of 3 workers at --compile-share 0.3 hold the one slot, one at a time, from the first on; the others
    evaluate built keys or defer. 15 s: on the 2-core CI machine, beside the suite, 8 s gave one build."""
    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], examples=None, seconds=15, workers=3,
                         progress=False, specs=("tests.campaign.fake_jit:backends",), replay_saved=False,
                         cache_dir=str(tmp_path / "c"), limits={"dtypes": ["float32", "bfloat16"], "tiers": ["small"]})
    rows = [r for r in run_campaign(cfg).rows if r.get("phase") == "generate"]
    builds = [(a, b) for _, a, b in _builds(tmp_path)]
    assert len(builds) >= 2, "fewer than two builds: the test would prove nothing"
    assert _most_at_once(builds) == 1, builds
    assert rows and any(not r.get("first_of_key") for r in rows)


def test_a_new_variant_s_build_is_gated_and_outlives_the_example_timeout(tmp_path, monkeypatch):
    """A first call of a new variant within a key the worker has run (Backend.jit_variant) builds longer than the
    example timeout: it holds a claim, gets the compile timeout and is no `timeout` row (on an H100 the example
    timeout killed 13 workers mid-build of such variants: campaigns/jit-untold-h100-2026-11-26.md); each variant is
    built once."""
    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit-variants"], examples=24, workers=2,
                         progress=False, specs=("tests.campaign.fake_jit:backends",), replay_saved=False,
                         cache_dir=str(tmp_path / "c"), example_timeout=VARIANT_COMPILE_S / 2,
                         limits={"dtypes": ["float32"], "head_sizes": [64], "tiers": ["small"]})
    rows = [r for r in run_campaign(cfg).rows if r.get("phase") == "generate"]
    per_module = Counter(k for k, _, _ in _builds(tmp_path))
    assert len(per_module) >= 3, "few variants drawn: the test would prove nothing"
    assert max(per_module.values()) == 1, per_module
    assert len(rows) == 24 and not [r["message"] for r in rows if r["verdict"] == "timeout"]


def test_every_first_call_of_a_variant_holds_a_slot_deferred_ones_too(tmp_path, monkeypatch):
    """Builds and loads of variants (a load of one another worker built costs FA4 2-5 s) hold the 2 compile slots of
    3 workers at --compile-share 0.67, at most 2 at once, also when a waiting case of a built key lands on a worker
    that lacks its variant: on an H100, FA4's first calls ran 12 at once on average against 5 slots
    (campaigns/jit-untold-h100-2026-11-26.md). Compile tasks leave one slot to loads. 18 s: 5 builds and 10 loads on the
    2-core CPU, 4-5 and 7-9 in 12 s."""
    rows, spent = _variants_for_18_s(tmp_path, monkeypatch, "test-fake-jit-variants", compile_share=0.67)
    firsts = [(a, b) for _, a, b in _builds(tmp_path) + _builds(tmp_path, "loads.log")]
    assert len(_builds(tmp_path, "loads.log")) >= 2, "fewer than two loads: the test would prove nothing"
    assert _most_at_once(firsts) <= 2, sorted(firsts)
    _waiting_cases_give_rows(rows, spent)
    # one key, a module per attention type: once a worker has run the key, its waiting draws are for other modules
    assert spent["variant_draw_s"] > 0, spent


def test_loads_in_process_take_no_slot_while_builds_keep_theirs(tmp_path, monkeypatch):
    """A backend that loads a variant built elsewhere inside its own process (FA4: Backend.loads_in_process) loads it
    where the case lands, beside builds that fill the one compile slot of 3 workers at --compile-share 0.34 (once FA4's
    loads of waiting cases were held to the slots, fa4-paged fell from 10.1 to 3.9 rows/s on an H100:
    campaigns/jit-untold-h100-2026-11-26.md). Builds still hold the slot, one at a time."""
    rows, spent = _variants_for_18_s(tmp_path, monkeypatch, "test-fake-jit-in-process-loads", compile_share=0.34)
    _waiting_cases_give_rows(rows, spent)
    builds, loads = _builds(tmp_path), _builds(tmp_path, "loads.log")
    assert len(builds) >= 2 and len(loads) >= 2, "few builds or loads: the test would prove nothing"
    spans = [(a, b) for _, a, b in builds]
    assert _most_at_once(spans) == 1, sorted(spans)
    firsts = spans + [(a, b) for _, a, b in loads]
    assert _most_at_once(firsts) >= 2, sorted(firsts)


def _variants_for_18_s(tmp_path, monkeypatch, backend: str, compile_share: float) -> tuple[list[dict], dict]:
    """An 18-s campaign of 3 workers over one dtype and head size of a stand-in with variants
    (tests/campaign/fake_jit.py), its builds and loads logged under tmp_path: (its generated rows, its tasks' counts
    and seconds: compile_draws.json)."""
    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    cfg = CampaignConfig(out=tmp_path / "out", backends=[backend], examples=None, seconds=18, workers=3, progress=False,
                         specs=("tests.campaign.fake_jit:backends",), replay_saved=False, cache_dir=str(tmp_path / "c"),
                         compile_share=compile_share,
                         limits={"dtypes": ["float32"], "head_sizes": [64], "tiers": ["small"]})
    result = run_campaign(cfg)
    record = json.loads((tmp_path / "out" / "compile_draws.json").read_text())
    return [r for r in result.rows if r.get("phase") == "generate"], record["time"][backend]


def _waiting_cases_give_rows(rows: list[dict], spent: dict) -> None:
    """Waiting cases follow their variant: their tasks give rows, the cases do not go back and forth between workers.
    Routed per compile key, 20 s of test-fake-jit-variants ran 6,716 tasks for 438 rows; per variant 74 for 1,032."""
    waited = sum(1 for r in rows if r.get("deferred"))
    assert waited, "no case waited: the test would prove nothing"
    assert spent.get("deferred_tasks", 0) <= waited, (spent, waited)


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of the (start, end) spans running at once, counted at each one's start."""
    return max(sum(1 for a2, b2 in spans if a2 <= a < b2) for a, _ in spans)


def test_a_share_of_one_compiles_every_case_where_it_is_drawn(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-fake-jit"], examples=30, workers=2, progress=False,
                         specs=("tests.campaign.fake_jit:backends",), replay_saved=False, compile_share=1.0,
                         limits={"dtypes": ["float32", "bfloat16"], "tiers": ["small"]})
    rows = [r for r in run_campaign(cfg).rows if r.get("phase") == "generate"]
    assert len(rows) == 30 and not any(r.get("deferred") for r in rows)


@pytest.mark.parametrize("name", ["fa4-varlen", "flashinfer-prefill-fa2", "vllm-triton-unified", "xformers-triton-splitk"])
def test_every_drawn_case_s_compile_key_is_a_declared_one(name):
    """The declared key space (campaign.declarations.compile_keys) holds the key of every case the fuzzer draws,
    so a key the coverage map counts as never drawn is one the campaign could have drawn."""
    from backends.registry import get
    from campaign.compiles import key_text
    from campaign.declarations import compile_keys
    from fuzz.strategies import Limits, compile_key
    from tests.repro_scripts import drawn_cases

    backend = get(name)
    declared = set(compile_keys(backend))
    drawn = [key_text(compile_key(c, backend.compiled_per, backend.compiled_features))
             for c in drawn_cases(backend.caps, Limits(max_sequences=3, max_context=24, max_query=6), 150)]
    assert drawn and set(drawn) <= declared, sorted(set(drawn) - declared)[:3]


def test_a_focused_shard_of_a_backend_that_builds_per_shape_draws_one_shape(tmp_path, monkeypatch):
    """Backend.jit_shape_per: each focused shard pins the head counts and window (fuzz.shapes), so its cases reuse the
    shard's few per-shape builds; shards differ, its shrinks draw alike, and a backend without the declaration draws
    shapes freely within a shard."""
    from campaign.tasks import Task, WorkerConfig
    from campaign.worker import Worker

    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    key = '["float32", [64, 64]]'
    shapes: dict = {}
    for name in ("test-fake-jit-shapes", "test-fake-jit-shapes-unpinned"):
        sent: list[dict] = []
        worker = Worker(WorkerConfig(cache_dir=str(tmp_path / "c"), specs=SPEC,
                                     limits={"tiers": ["small"], "features": ["context", "gqa", "mqa", "window"]}),
                        send=sent.append)
        for shard in (3, 4, 5, 6):
            worker.run(Task(TaskKind.GENERATE, name, shard=shard, size=6, start=0, key=key))
        for row in (m["row"] for m in sent if m["type"] == "row"):
            case = json.loads(row["case"])
            shapes.setdefault(name, {}).setdefault(row["shard"], set()).add(
                (case["num_heads"], case["num_kv_heads"], case["sliding_window"]))
        if name == "test-fake-jit-shapes":
            assert set(worker.pins) == {(name, j) for j in (3, 4, 5, 6)}
            again = worker._backend(name, 4, key)[1]  # a shrink of shard 4 draws from the same pinned strategy
            assert again is worker._backend(name, 4, key)[1] and again is not worker._backend(name, 5, key)[1]
    pinned, free = shapes["test-fake-jit-shapes"], shapes["test-fake-jit-shapes-unpinned"]
    assert sum(len(v) for v in pinned.values()) >= 4, "few rows: the test would prove nothing"
    # one (heads, kv heads) pair per shard; the window pinned too, where drawn (or none)
    assert all(len({s[:2] for s in v}) == 1 and len({s[2] for s in v} - {None}) <= 1 for v in pinned.values()), pinned
    assert len({s[:2] for v in pinned.values() for s in v}) >= 2, pinned
    assert max(len({s[:2] for s in v}) for v in free.values()) >= 2, free
