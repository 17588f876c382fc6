"""The scheduler, driven by its events alone (no process started)."""
from __future__ import annotations

from campaign.scheduler import Scheduler
from campaign.tasks import Task, TaskKind, shard_seed


def _drain(s: Scheduler, shard_results=None) -> list[Task]:
    """Run every task to completion, one worker after another; returns the tasks in order."""
    done = []
    for _ in range(1000):
        assigned = s.schedule()
        if not assigned:
            break
        for wid, task in assigned:
            if task.kind == TaskKind.GENERATE:
                n = (shard_results or {}).get((task.backend, task.shard), task.size)
                for i in range(task.start + 1, n + 1):
                    s.example_done(task.backend, task.shard, i)
                s.task_done(wid, exhausted=n < task.size)
            else:
                s.task_done(wid)
            done.append(task)
    return done


def test_every_backend_gets_exactly_its_budget_in_shards():
    s = Scheduler(["a", "b"], examples=250, shard_size=100)
    for w in range(3):
        s.add_worker(w)
    tasks = _drain(s)
    assert s.finished
    assert s.generated("a") == 250 and s.generated("b") == 250
    assert sorted(t.size for t in tasks if t.backend == "a") == [20, 30, 100, 100]  # shard 0: the warm-up


def test_backends_run_side_by_side_not_one_after_another():
    s = Scheduler(["a", "b", "c"], examples=1000, shard_size=10)
    for w in range(3):
        s.add_worker(w)
    first = s.schedule()
    assert sorted(t.backend for _, t in first) == ["a", "b", "c"]


def test_a_worker_stays_on_its_backend_when_nothing_else_differs():
    s = Scheduler(["a", "b"], examples=None, shard_size=10)
    s.add_worker(0)
    s.add_worker(1)
    first = dict(s.schedule())
    for wid, task in first.items():
        for i in range(1, 11):
            s.example_done(task.backend, task.shard, i)
    s.task_done(1)
    again = dict(s.schedule())
    assert again[1].backend == first[1].backend  # warm: its compiled kernels live in that process


def test_a_shard_cut_short_continues_where_it_stopped():
    s = Scheduler(["a"], examples=20, shard_size=20)
    s.add_worker(0)
    (wid, task), = s.schedule()
    for i in range(1, 8):
        s.example_done("a", task.shard, i)
    lost = s.worker_lost(wid)
    assert lost == task
    s.add_worker(1)
    (_, cont), = s.schedule()
    assert (cont.shard, cont.start, cont.size) == (task.shard, 7, 20)


def test_resume_continues_partial_shards_and_reaches_the_budget():
    s = Scheduler(["a"], examples=34, shard_size=10, done={("a", 0): (10, 10, "", False, 0),
                                                           ("a", 1): (4, 10, '["k"]', False, 0),
                                                           ("a", 2): (1, 4, '["t"]', True, 0),
                                                           ("a", 4): (3, 10, '["k"]', False, 1)})
    s.add_worker(0)
    tasks = _drain(s)
    assert (tasks[0].shard, tasks[0].start, tasks[0].key) == (1, 4, '["k"]')  # a focused shard draws as it did
    assert (tasks[1].shard, tasks[1].start, tasks[1].tour) == (2, 1, True)  # a tour draws without the prefix again
    assert (tasks[2].shard, tasks[2].start, tasks[2].pins_of) == (4, 3, 1)  # with the pins it drew
    assert s.generated("a") == 34 and [t.shard for t in tasks] == [1, 2, 4]


def test_resume_reads_each_shard_s_progress_and_focus_from_the_rows():
    from campaign.store import resume_state

    rows = [{"phase": "generate", "backend": "a", "shard": 1, "index": i, "shard_size": 10, "run": 1,
             **({"focus_key": '["k"]'} if i > 1 else {})} for i in (1, 2, 3)]
    rows.append({"phase": "generate", "backend": "a", "shard": 2, "index": 5, "shard_size": 10, "run": 2})
    rows.append({"phase": "generate", "backend": "a", "shard": 3, "index": 2, "shard_size": 4, "run": 2,
                 "focus_key": '["t"]', "tour": True})
    rows.append({"phase": "generate", "backend": "a", "shard": 4, "index": 6, "shard_size": 10, "run": 2,
                 "focus_key": '["k"]', "pins_of": 1, "deferred": True})  # a waiting case's row says its pins too
    assert resume_state(rows) == ({("a", 1): (3, 10, '["k"]', False, 0), ("a", 2): (5, 10, "", False, 0),
                                   ("a", 3): (2, 4, '["t"]', True, 0), ("a", 4): (6, 10, '["k"]', False, 1)}, 3)


def test_an_exhausted_shard_moves_its_budget_to_a_new_one():
    s = Scheduler(["a"], examples=30, shard_size=30)
    s.add_worker(0)
    _drain(s, shard_results={("a", 0): 12})
    assert s.generated("a") == 30 and len(s.shards["a"]) == 2


def test_replays_come_first_and_shrinks_are_capped():
    s = Scheduler(["a"], examples=None, shard_size=10, replays={"a": ("{}",)}, max_shrinking=1)
    for w in range(3):
        s.add_worker(w)
    s.add(Task(TaskKind.SHRINK, "a", shard=0, size=10, target=3, signature=("a", "mismatch", "output")))
    s.add(Task(TaskKind.SHRINK, "a", shard=1, size=10, target=5, signature=("a", "mismatch", "lse")))
    kinds = [t.kind for _, t in s.schedule()]
    assert kinds[0] == TaskKind.REPLAY and kinds.count(TaskKind.SHRINK) == 1 and TaskKind.GENERATE in kinds


def test_later_shrinks_wait_for_their_share_of_generated_examples():
    s = Scheduler(["a"], examples=None, shard_size=10, shrink_share=0.25)
    s.add_worker(0)
    s.add(Task(TaskKind.SHRINK, "a", signature=("a", "mismatch", "output")))
    s.add(Task(TaskKind.SHRINK, "a", signature=("a", "mismatch", "lse")))
    (_, first), = s.schedule()
    assert first.kind == TaskKind.SHRINK  # a backend's first shrink is what a kill needs: at once
    for _ in range(40):
        s.shrink_example_done()
    s.task_done(0)
    (_, second), = s.schedule()
    assert second.kind == TaskKind.GENERATE  # 40 shrink rows > 25% of 0 generated
    for i in range(1, 11):
        s.example_done("a", second.shard, i)
    s.task_done(0)
    assert s.schedule()[0][1].kind == TaskKind.GENERATE
    for _ in range(200):
        s.example_done("a", 99, 1)
    s.task_done(0)
    assert s.schedule()[0][1].kind == TaskKind.SHRINK


def test_stop_hands_out_nothing_more_and_finishes_when_running_tasks_end():
    s = Scheduler(["a"], examples=None, shard_size=10)
    s.add_worker(0)
    s.add_worker(1)
    s.schedule()
    s.stop()
    assert not s.finished
    s.task_done(0)
    s.worker_lost(1)
    assert s.finished and s.schedule() == []


def test_a_broken_backend_gets_no_more_tasks():
    s = Scheduler(["a", "b"], examples=20, shard_size=10)
    s.add_worker(0)
    s.give_up("a", "its worker cannot start")
    tasks = _drain(s)
    assert {t.backend for t in tasks} == {"b"} and s.finished


def test_shard_seeds_are_stable_and_distinct():
    assert shard_seed(0, "a", 1) == shard_seed(0, "a", 1)
    assert len({shard_seed(0, "a", j) for j in range(100)} | {shard_seed(1, "a", 0), shard_seed(0, "b", 0)}) == 102


def test_auto_workers_follow_cores_over_gpus_and_gpu_memory():
    from campaign.machine import default_workers

    assert default_workers(0, cores=2) == 2  # no GPU: one per core
    assert default_workers(1, cores=16, gpu_mem_gib=80) == 16
    assert default_workers(2, cores=32, gpu_mem_gib=141) == 16  # per GPU
    assert default_workers(1, cores=16, gpu_mem_gib=20) == 5  # 4 GiB each


def test_with_fewer_workers_than_backends_every_backend_gets_turns():
    s = Scheduler(["a", "b", "c", "d"], examples=None, shard_size=5)
    s.add_worker(0)
    seen = []
    for _ in range(8):
        (wid, task), = s.schedule()
        for i in range(task.start + 1, task.size + 1):
            s.example_done(task.backend, task.shard, i)
        s.task_done(wid)
        seen.append(task.backend)
    assert set(seen) == {"a", "b", "c", "d"} and seen[:4] == ["a", "b", "c", "d"]


def _run_generation(s: Scheduler, workers: int, rounds: int, exhausted=frozenset()) -> list[tuple[int, Task]]:
    """Each round every worker takes a task and finishes it; shards of `exhausted` slices run out of cases."""
    for w in range(workers):
        s.add_worker(w)
    log = []
    for _ in range(rounds):
        assigned = s.schedule()
        for wid, task in assigned:
            spent = s.slice_of(task.backend, task.shard) in exhausted
            n = task.start if spent else task.size
            for i in range(task.start + 1, n + 1):
                s.example_done(task.backend, task.shard, i)
            s.task_done(wid, exhausted=spent)
        log += assigned
    return log


def test_a_worker_keeps_its_compile_slice_so_each_variant_compiles_in_few_workers():
    s = Scheduler(["jit"], examples=None, shard_size=10, slices={"jit": 4})
    log = _run_generation(s, workers=4, rounds=12)
    slices_of = {w: [s.slice_of("jit", t.shard) for wid, t in log if wid == w and t.shard > 0] for w in range(4)}
    assert all(len(set(v)) == 1 for v in slices_of.values()), slices_of  # a worker stays on its slice
    assert {v[0] for v in slices_of.values()} == {0, 1, 2, 3}  # and the workers cover all of them


def test_fewer_workers_than_slices_rotate_through_every_slice_in_runs():
    s = Scheduler(["jit"], examples=None, shard_size=10, slices={"jit": 6})
    log = _run_generation(s, workers=2, rounds=30)
    shards = [t.shard for _, t in log if t.shard > 0]
    counts = [sum(1 for j in shards if s.slice_of("jit", j) == p) for p in range(6)]
    assert max(counts) - min(counts) <= 3, counts  # balanced within the slack
    seq = [s.slice_of("jit", t.shard) for w, t in log if w == 0 and t.shard > 0]
    switches = sum(a != b for a, b in zip(seq, seq[1:]))
    assert switches < len(seq) / 2, seq  # runs of one slice, not a new slice (new compiles) every shard


def test_a_slice_that_ran_out_of_cases_is_not_drawn_again_and_the_budget_is_still_met():
    s = Scheduler(["jit"], examples=300, shard_size=10, slices={"jit": 3})
    log = _run_generation(s, workers=3, rounds=200, exhausted={1})
    assert sum(1 for _, t in log if s.slice_of("jit", t.shard) == 1) <= 3  # each worker learns it once at most
    assert s.generated("jit") == 300 and s.finished


def test_without_slices_shards_are_numbered_in_order_as_before():
    s = Scheduler(["a"], examples=None, shard_size=10)
    log = _run_generation(s, workers=3, rounds=3)
    assert sorted(t.shard for _, t in log) == list(range(9)) and s.slice_of("a", 5) is None
