"""What a campaign is asked to do (CampaignConfig), what it returns (CampaignResult, its exit statuses), and what the
driver needs of the plumbing that runs its workers (local processes or Ray actors)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .tasks import Task

EXIT_CLEAN, EXIT_NEW_FAILURES, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3


@dataclass
class CampaignConfig:
    out: Path
    backends: list[str]
    examples: int | None = 200  # per backend; None: until `seconds` run out
    seconds: float | None = None  # for the whole campaign, backends side by side
    seed: int = 0
    example_timeout: float = 120.0
    # an example that is its worker's first of a JIT backend's compile key (campaign.worker) may compile for
    # minutes: nvcc builds of FlashInfer's fa3 prefill outran 240 s with 16 compiles at once. None: example_timeout
    compile_timeout: float | None = 900.0
    specs: tuple[str, ...] = ()
    resume: bool = False
    limits: dict = field(default_factory=dict)
    workers: int | str = 1  # per GPU (every visible GPU), or in all on a machine without one; "auto"
    shard_size: int | None = None  # None: from the budget and the number of workers
    shrink_per_bucket: int = 1
    shrink_seconds: float = 20.0
    oracle_cpu_max: int | None = None  # None: fuzz.compare.ORACLE_CPU_MAX
    replay_saved: bool = True  # run the minimal cases in out/cases/ first
    ray_address: str | None = None  # None: local processes; "" / "local": a local Ray; else a cluster
    use_ray: bool = False
    progress: bool = True
    compile_slices: bool = False  # see campaign.scheduler: more examples/s on JIT backends, fewer combinations early
    mps: bool = False  # run the workers under a CUDA MPS daemon (campaign/mps.py)
    cache_dir: str | None = None  # the JIT libraries' compile caches (campaign/caches.py); None: the default folder
    # JIT first calls' share of the workers after the warm-up (campaign.claims.compile_slots_at); 1: compile where drawn
    compile_share: float = 0.2
    profile_dir: str | None = None  # --profile: the workers' and the driver's cProfile statistics (campaign.profiling)


@dataclass
class CampaignResult:
    rows: list[dict]
    buckets: list
    status: int
    interrupted: int | None = None  # the signal that stopped the campaign
    harness_errors: list[str] = field(default_factory=list)


class Plumbing(Protocol):
    """Turns workers (processes, actors) into events; see campaign.pool and campaign.ray_pool."""

    slots: int

    def start(self, wid: int, slot: int) -> None: ...
    def assign(self, wid: int, task: Task, deadline: float | None) -> None: ...
    def poll(self, timeout: float) -> list[tuple]: ...  # ("msg", wid, dict) | ("exit", wid, status, output)
    def stop(self, wid: int) -> None: ...
    def kill(self, wid: int) -> None: ...
    def close(self) -> None: ...


class HarnessAbort(Exception):
    """The campaign cannot go on (a worker cannot be started): it ends with this one line and exit 3."""
