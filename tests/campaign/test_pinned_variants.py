"""Focused shards of a backend whose JIT builds per pinned shape (FA4's variants: fuzz.shapes, Backend.jit_variant):
a shard whose draws keep waiting for modules ends early (campaign.worker.STALL_DRAWS), and new focused shards mostly
draw the pins of a shard that got rows (campaign.pins.REUSED_PINS_PER_FRESH), so their variant is built."""
from __future__ import annotations

import json

from campaign.pins import REUSED_PINS_PER_FRESH
from campaign.scheduler import Scheduler
from campaign.tasks import Task, TaskKind, WorkerConfig
from campaign.worker import STALL_DRAWS, Worker

SPEC = ("tests.campaign.fake_jit:backends",)
KEY = '["float32", [64, 64]]'
LIMITS = {"tiers": ["small"], "features": ["context", "gqa", "mqa", "encoder_decoder", "encoder_only"]}


def _worker(tmp_path, monkeypatch, sent: list) -> Worker:
    monkeypatch.setenv("FAKE_JIT_DIR", str(tmp_path))
    return Worker(WorkerConfig(cache_dir=str(tmp_path / "c"), specs=SPEC, limits=LIMITS), send=sent.append)


def test_a_shard_whose_draws_all_wait_ends_after_stall_draws(tmp_path, monkeypatch):
    """Every compile slot busy (no claim): the shard's draws all wait, and the task ends after STALL_DRAWS of them,
    saying so; where waiting draws alternate with evaluated ones it runs to its size."""
    sent: list[dict] = []
    worker = _worker(tmp_path, monkeypatch, sent)
    monkeypatch.setattr(worker.claims, "claim", lambda *a, **k: None)
    worker.run(Task(TaskKind.GENERATE, "test-fake-jit-pinned-variants", shard=3, size=60, start=0))
    waited = [m for m in sent if m["type"] == "deferred"]
    done, = [m for m in sent if m["type"] == "done"]
    assert len(waited) == STALL_DRAWS and done["stalled"] and not done["exhausted"]
    assert not [m for m in sent if m["type"] == "row"]

    sent.clear()
    turns = iter(range(1000))
    monkeypatch.setattr(worker, "_defers", lambda backend, case, built: (
        (("k", "u"), None) if next(turns) % 2 else (None, None)))
    worker.run(Task(TaskKind.GENERATE, "test-fake-jit", shard=4, size=24, start=0))
    rows = [m for m in sent if m["type"] == "row"]
    done, = [m for m in sent if m["type"] == "done"]
    assert not done["stalled"] and len(rows) + len([m for m in sent if m["type"] == "deferred"]) == 24


def test_a_shard_drawing_another_s_pins_draws_its_shape_with_its_own_seed(tmp_path, monkeypatch):
    """pins_of: shard 7 draws shard 5's pinned shape (the same strategy in the process), its own cases, not the
    simplest ones shard 5 drew first (the fixed prefix); its rows say whose pins they drew, so a resume and its
    shrinks draw alike."""
    sent: list[dict] = []
    worker = _worker(tmp_path, monkeypatch, sent)
    name = "test-fake-jit-pinned-variants"
    for shard, pins_of in ((5, 0), (7, 5), (8, 0)):
        worker.run(Task(TaskKind.GENERATE, name, shard=shard, size=8, start=0, key=KEY, pins_of=pins_of))
    rows = [m["row"] for m in sent if m["type"] == "row"]
    by_shard: dict[int, list] = {}
    for r in rows:
        case = json.loads(r["case"])
        by_shard.setdefault(r["shard"], []).append(((case["num_heads"], case["num_kv_heads"], case["attn_type"]), r))
    assert set(by_shard) == {5, 7, 8}, "a shard without rows: the test would prove nothing"
    shape = {j: {s for s, _ in v} for j, v in by_shard.items()}
    assert len(shape[5]) == 1 and shape[7] == shape[5]
    assert {r["shape_pins"] for _, r in by_shard[7]} == {r["shape_pins"] for _, r in by_shard[5]}
    assert all(r.get("pins_of") == 5 for _, r in by_shard[7]) and not any("pins_of" in r for _, r in by_shard[5])
    # its own seed's cases, past the simplest ones hypothesis draws whatever the seed, which shard 5 evaluated
    assert not {r["case"] for _, r in by_shard[7]} & {r["case"] for _, r in by_shard[5]}
    assert worker._backend(name, 7, KEY, pins_of=5)[1] is worker._backend(name, 5, KEY)[1]
    assert worker._backend(name, 8, KEY)[1] is not worker._backend(name, 5, KEY)[1]


def test_new_focused_shards_mostly_borrow_the_pins_of_shards_that_got_rows_and_a_stalled_shard_closes():
    s = Scheduler(["jit"], examples=None, shard_size=5)
    s.add_worker(0)
    focused: list[tuple[int, int]] = []  # (shard, pins_of) in the order they went out
    stalled_shard = None
    for n in range(40):
        (wid, task), = s.schedule()
        if task.shard == 0:
            s.key_built("jit", KEY, wid=0)
        if task.key:
            focused.append((task.shard, task.pins_of))
        if task.key and not task.pins_of and stalled_shard is None and len(focused) > 3:
            stalled_shard = task.shard  # its draws all waited: no row
            s.defer("jit", KEY, "case", {"shard": task.shard, "index": STALL_DRAWS, "shard_size": task.size})
            s.task_done(wid, stalled=True)
            continue
        s.example_done("jit", task.shard, task.size)
        s.task_done(wid)
    assert stalled_shard is not None and s.shards["jit"][stalled_shard].closed
    assert all(t.shard != stalled_shard for t in [s._generate_for("jit")])  # not taken up again
    sources = {j for j, p in focused if p}
    rows_of = {j for j, p in focused if j != stalled_shard}
    assert sources and sources <= rows_of and stalled_shard not in sources
    for i in range(1, len(focused) + 1):  # at every point, at most REUSED_PINS_PER_FRESH borrowed per fresh shard
        fresh = sum(1 for _, p in focused[:i] if not p)
        assert sum(1 for _, p in focused[:i] if p) <= REUSED_PINS_PER_FRESH * fresh
    assert sum(1 for _, p in focused if p) >= len(focused) // 2  # most of them, once shards got rows
    assert len(sources) >= 2  # spread over the shapes that got rows


def test_a_worker_borrows_the_pins_it_has_drawn_before():
    """Its variant is loaded there already: FA4 loads one another process built in 2-5 s per process."""
    s = Scheduler(["jit"], examples=None, shard_size=5)
    for wid in (0, 1):
        s.add_worker(wid)
        s.key_built("jit", KEY, wid=wid)
    ran: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for _ in range(30):
        for wid, task in s.schedule():
            if task.key:
                ran[wid].append((task.shard, task.pins_of))
            s.example_done("jit", task.shard, task.size)
            s.task_done(wid)
    for wid in (0, 1):
        here: set[int] = set()  # the shapes this worker has drawn (every shard got rows here)
        for shard, pins_of in ran[wid]:
            if pins_of and here:
                assert pins_of in here, (wid, ran)
            here.add(pins_of or shard)
        assert any(p for _, p in ran[wid]) and len(here) >= 2, ran


def test_a_shape_that_left_a_sticky_crash_is_not_lent_and_its_shard_ends():
    """Lent, such a shape crashed one borrowing case after another, each a worker restart (campaign.pins.crashed)."""
    s = Scheduler(["jit"], examples=None, shard_size=5)
    s.add_worker(0)
    s.key_built("jit", KEY, wid=0)
    crashed = None
    lent_after: list[int] = []
    for _ in range(30):
        (wid, task), = s.schedule()
        if task.key and not task.pins_of and crashed is None and task.shard > 1:
            crashed = task.shard
            s.example_done("jit", task.shard, 2, sticky=True)  # its second case crashed the context
            s.worker_lost(wid)
            s.add_worker(wid)
            s.key_built("jit", KEY, wid=wid)  # the fresh worker loads the key's module again
            continue
        if crashed is not None and task.pins_of:
            lent_after.append(task.pins_of)
        s.example_done("jit", task.shard, task.size)
        s.task_done(wid)
    assert crashed is not None and s.shards["jit"][crashed].closed and s.shards["jit"][crashed].done == 2
    assert lent_after and crashed not in lent_after


def test_a_resumed_campaign_does_not_take_up_a_shard_whose_shape_crashed(tmp_path):
    from campaign.engine import CampaignConfig, Driver
    from tests.campaign.test_compiles import SPEC, _Pool

    out = tmp_path / "out"
    out.mkdir()
    base = {"backend": "test-fake-jit", "phase": "generate", "shard_size": 10, "focus_key": KEY, "run": 1}
    rows = [dict(base, shard=3, index=1, verdict="pass"), dict(base, shard=3, index=2, verdict="crash", sticky=True),
            dict(base, shard=4, index=1, verdict="pass", pins_of=3)]
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = CampaignConfig(out=out, backends=["test-fake-jit"], seconds=60, specs=SPEC, progress=False, resume=True)
    s = Driver(cfg, _Pool(), WorkerConfig(compile_slots=5, specs=SPEC)).scheduler
    assert s.shards["test-fake-jit"][3].closed and not s.shards["test-fake-jit"][4].closed
    s.example_done("test-fake-jit", 4, 2)  # a row of a shard that borrowed the crashed shape: not lent again
    assert 3 not in s.pins.productive["test-fake-jit", KEY]


def test_while_builds_pause_every_focused_shard_borrows_a_shape_that_got_rows():
    """A fresh shape's variant is not built while the backend's new builds pause (campaign.budget's allowance): its
    shard's draws would all wait. Before the pause the lender keeps drawing fresh shapes beside the borrowed ones."""
    s = Scheduler(["jit"], examples=None, shard_size=5)
    s.add_worker(0)
    before: list[int] = []
    during: list[int] = []
    for n in range(60):
        (wid, task), = s.schedule()
        if task.shard == 0:
            s.key_built("jit", KEY, wid=0)
        if task.key and not task.tour and task.kind == TaskKind.GENERATE:
            (during if s.paused else before).append(task.pins_of)
        s.example_done("jit", task.shard, task.size)
        s.task_done(wid)
        if n == 20:
            s.paused = {"jit"}
    assert before and during, "no focused shard on one side of the pause: the test would prove nothing"
    assert any(p == 0 for p in before[1:]), before  # fresh shapes beside borrowed ones before it
    assert all(p != 0 for p in during), during


def test_a_key_whose_fresh_shape_stalled_in_a_pause_leaves_its_turns_to_the_worker_s_other_keys():
    """No focused shard of the key got rows, so there is no shape of it to lend; one with fresh pins stalled while
    builds paused. The worker's other loaded key takes the focused shards; with no other key loaded, a built key with a
    shape to lend that other workers loaded; with none of those either, the starved one is still drawn, and a row of it
    makes it a key like the others."""
    other = '["float32", [32, 32]]'
    s = Scheduler(["jit"], examples=None, shard_size=5)
    s.add_worker(0)
    s.paused = {"jit"}
    s.key_built("jit", KEY, wid=0)
    keys: list[str] = []
    starved_once = False
    for _ in range(40):
        (wid, task), = s.schedule()
        if task.key == KEY and not task.pins_of and not starved_once:
            starved_once = True
            s.defer("jit", KEY, "case", {"shard": task.shard, "index": STALL_DRAWS, "shard_size": task.size})
            s.task_done(wid, stalled=True, rows=0)
            s.key_built("jit", other, wid=0)
            continue
        if task.key and task.kind == TaskKind.GENERATE:
            keys.append(task.key)
        s.example_done("jit", task.shard, task.size)
        s.task_done(wid)
    assert starved_once and keys and set(keys) == {other}, keys
    s.loaded[0].discard(("jit", other))
    elsewhere = []
    for _ in range(12):
        (wid, task), = s.schedule()
        if task.key and task.kind == TaskKind.GENERATE:
            elsewhere.append((task.key, task.pins_of))
        s.example_done("jit", task.shard, task.size)
        s.task_done(wid)
    assert elsewhere and {k for k, _ in elsewhere} == {other} and all(p for _, p in elsewhere), elsewhere
    s.pins.productive.pop(("jit", other))  # no shape of it to lend either
    again = []
    for _ in range(12):
        (wid, task), = s.schedule()
        if task.key and task.kind == TaskKind.GENERATE:
            again.append(task.key)
        s.example_done("jit", task.shard, task.size)  # a row: KEY's shards get rows again
        s.task_done(wid)
    assert again and set(again) == {KEY}, again  # the only key left to focus on: drawn still
    assert KEY not in s.shape_starved["jit"]


def test_a_worker_with_nothing_loaded_takes_a_built_key_that_is_not_starved():
    """The whole space is not due (a whole-space shard stalled since the last build), so a worker with no key loaded
    takes a built key: not the one whose fresh shape stalled in the pause, while another is built."""
    other = '["float32", [32, 32]]'
    s = Scheduler(["jit"], examples=None, shard_size=5, compile_slots=2)
    s.add_worker(0)
    s.paused = {"jit"}
    s.key_built("jit", KEY, wid=0)
    s.key_built("jit", other, wid=0)
    s.shape_starved["jit"].add(other)  # the first of the two by name, which the worker took before
    s.whole_stalled["jit"] = len(s.backlog.built["jit"])
    s.add_worker(1)
    assert s._focus("jit", 1) == (KEY, False)
    s.shape_starved["jit"].add(KEY)
    assert s._focus("jit", 1) == (other, False)  # every built key starved: one of them still, not the whole space
