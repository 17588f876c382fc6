"""Fixed prefixes kept on disk (campaign.drawing.PrefixStore): a hit gives the prefix a full calibration computes,
for a sixteenth of its draws; another strategy misses; a damaged file is computed again; a second worker process of
a campaign reads what the first one wrote."""
from __future__ import annotations

import tempfile
from unittest import mock

import campaign.drawing as drawing
from backends.registry import get
from campaign.caches import PREFIXES_FOLDER
from campaign.tasks import Task, TaskKind, WorkerConfig
from campaign.worker import Worker
from fuzz.strategies import Limits, cases

NAIVE = get("torch-naive-paged").caps


def counted(store):
    """fixed_prefix(strategy, store=store) with the number of early_draws calls it made."""
    calls = []
    real = drawing.early_draws

    def early(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    def run(strategy, seeds=drawing.PREFIX_SEEDS):
        calls.clear()
        with mock.patch.object(drawing, "early_draws", early):
            return drawing.fixed_prefix(strategy, seeds, store), list(calls)
    return run


def test_a_stored_prefix_is_the_computed_one_for_one_seed_of_draws(tmp_path):
    drawing.pin_hypothesis_constants()
    strategy = cases(NAIVE, Limits(dtypes=("bfloat16",), head_sizes=(128,)))
    plain = drawing.fixed_prefix(strategy)
    run = counted(drawing.PrefixStore(tmp_path))
    first, calls = run(strategy)
    assert first == plain and plain and calls == list(range(1, drawing.PREFIX_SEEDS + 1))
    again, calls = run(strategy)
    assert again == plain and calls == [1]
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_another_strategy_or_seed_count_misses(tmp_path):
    drawing.pin_hypothesis_constants()
    run = counted(drawing.PrefixStore(tmp_path))
    run(cases(NAIVE, Limits(dtypes=("bfloat16",), head_sizes=(128,))))
    _, calls = run(cases(NAIVE, Limits(dtypes=("float16",), head_sizes=(64,))))
    assert len(calls) == drawing.PREFIX_SEEDS
    _, calls = run(cases(NAIVE, Limits(dtypes=("float16",), head_sizes=(64,))), seeds=4)
    assert len(calls) == 4
    assert len(list(tmp_path.glob("*.json"))) == 3


def test_a_damaged_file_is_computed_again(tmp_path):
    drawing.pin_hypothesis_constants()
    strategy = cases(NAIVE, Limits(dtypes=("bfloat16",), head_sizes=(128,)))
    run = counted(drawing.PrefixStore(tmp_path))
    plain, _ = run(strategy)
    (stored,) = tmp_path.glob("*.json")
    stored.write_text('["half a')
    again, calls = run(strategy)
    assert again == plain and len(calls) == drawing.PREFIX_SEEDS
    assert drawing.PrefixStore(tmp_path).get(stored.stem) == plain  # written whole again


def test_a_second_worker_reads_the_prefix_the_first_wrote():
    cache = tempfile.mkdtemp()
    config = WorkerConfig(seed=0, limits={"dtypes": ["bfloat16"], "head_sizes": [64]}, cache_dir=cache)
    seeds = []
    real = drawing.early_draws

    def early(*args, **kwargs):
        seeds.append(args[1])
        return real(*args, **kwargs)

    prefixes = []
    for _ in range(2):  # two processes' workers: each builds its strategy and prefix once
        worker = Worker(config, send=lambda message: None)
        seeds.clear()
        with mock.patch.object(drawing, "early_draws", early):
            worker.run(Task(TaskKind.GENERATE, "torch-naive-paged", shard=1, size=2, start=0))
        prefixes.append(worker._prefixes)
        assert seeds == (list(range(1, drawing.PREFIX_SEEDS + 1)) if len(prefixes) == 1 else [1])
    assert prefixes[0] == prefixes[1] and any(prefixes[0].values())
    assert list((worker.prefix_store.folder).glob("*.json")) and worker.prefix_store.folder.name == PREFIXES_FOLDER
