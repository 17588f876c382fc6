"""Units of work a campaign hands to its workers, and the seed every shard is drawn from.

A backend's examples are cut into shards. Shard j of backend b is one hypothesis run seeded by
`shard_seed(campaign_seed, b, j)`: the same shard always draws the same cases, in the same order,
on any worker, local or on Ray. That makes three things cheap and exact:
  - resume: a shard cut off after n examples continues at example n + 1 (the first n are drawn
    again, not evaluated);
  - shrinking: example i of shard j is drawn again in any worker and shrunk there, while the
    worker that found it keeps generating;
  - the same seeds give the same generated cases and verdicts whatever runs them.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from enum import Enum


class TaskKind(Enum):
    GENERATE = "generate"  # examples start+1 .. size of a shard
    SHRINK = "shrink"  # draw example `target` of a shard again and shrink it while it fails the same way
    REPLAY = "replay"  # run saved minimal cases first, so a fixed bug shows as fixed
    DEFERRED = "deferred"  # generated cases a worker deferred until their JIT module exists (campaign.compiles)


@dataclass(frozen=True)
class Task:
    kind: TaskKind
    backend: str
    shard: int = 0
    size: int = 0  # examples the shard holds (GENERATE and SHRINK draw the shard with this size)
    start: int = 0  # GENERATE: examples of the shard already done
    target: int = 0  # SHRINK: the failing example's index in the shard (1-based)
    signature: tuple[str, str, str] | None = None  # SHRINK: (backend, verdict, symptom) to keep failing
    cases: tuple[str, ...] = field(default_factory=tuple)  # REPLAY, DEFERRED: case JSON texts
    wheres: tuple[dict, ...] = field(default_factory=tuple)  # DEFERRED: each case's shard, index and shard_size
    key: str = ""  # DEFERRED: its cases' compile key; GENERATE, SHRINK: the key a focused shard draws (campaign.compiles)
    unit: str = ""  # DEFERRED: the module its cases wait for (Backend.jit_variant; "": the key)
    built: tuple[str, ...] = field(default_factory=tuple)  # GENERATE: modules some worker has built
    # DEFERRED of an unbuilt key while generation goes on (a compile task beside evaluation): it builds only with a
    # free compile slot, else its cases go back to wait (campaign.claims)
    needs_slot: bool = False
    tour: bool = False  # GENERATE: a few draws of a compile key nothing was drawn of (campaign.focus.TOUR_SIZE)
    slots: int = 0  # the campaign's compile slots when the task went out (campaign.claims.compile_slots_at; 0: config)
    pins_of: int = 0  # GENERATE, SHRINK: the shard whose pinned shape a focused shard draws (0: its own; fuzz.shapes)
    builds: bool = True  # a first call may build a module (False near a campaign's end: campaign.compiles.BuildTimes)
    # DEFERRED with needs_slot, of a starved backend (campaign.compiles.FirstCalls): seconds it waits for a busy slot,
    # ahead of generation's claims (campaign.claims.SLOT_WAIT_S); 0: it takes a free one or gives its cases back
    slot_wait: float = 0.0

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "backend": self.backend, "shard": self.shard, "size": self.size,
                "start": self.start, "target": self.target,
                "signature": list(self.signature) if self.signature else None, "cases": list(self.cases),
                "wheres": list(self.wheres), "key": self.key, "unit": self.unit, "built": list(self.built),
                "needs_slot": self.needs_slot, "tour": self.tour, "slots": self.slots, "pins_of": self.pins_of,
                "builds": self.builds, "slot_wait": self.slot_wait}

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        return cls(kind=TaskKind(d["kind"]), backend=d["backend"], shard=d["shard"], size=d["size"],
                   start=d["start"], target=d["target"],
                   signature=tuple(d["signature"]) if d.get("signature") else None, cases=tuple(d.get("cases") or ()),
                   wheres=tuple(d.get("wheres") or ()), key=d.get("key", ""), unit=d.get("unit", ""),
                   built=tuple(d.get("built") or ()),
                   needs_slot=bool(d.get("needs_slot")), tour=bool(d.get("tour")), slots=int(d.get("slots") or 0),
                   pins_of=int(d.get("pins_of") or 0), builds=bool(d.get("builds", True)),
                   slot_wait=float(d.get("slot_wait") or 0.0))

    @property
    def shard_kind(self) -> str:
        """What a GENERATE task's shard draws (campaign.scheduler): the warm-up, a tour of an undrawn key, a focused
        shard with pins of its own or borrowed (`pins_of`), or the whole space."""
        if self.shard == 0:
            return "warm-up"
        if self.tour:
            return "tour"
        if self.key:
            return "focused, borrowed pins" if self.pins_of else "focused"
        return "whole space"

    @property
    def label(self) -> str:
        if self.kind == TaskKind.GENERATE:
            focus = f" of compile key {self.key}" if self.key else ""
            return f"{self.backend} shard {self.shard} [{self.start + 1}..{self.size}]{focus}"
        if self.kind == TaskKind.SHRINK:
            return f"{self.backend} shrink shard {self.shard} example {self.target}"
        if self.kind == TaskKind.DEFERRED:
            return f"{self.backend} {len(self.cases)} deferred cases of compile key {self.key}"
        return f"{self.backend} replay {len(self.cases)} saved cases"


def shard_seed(campaign_seed: int, backend: str, shard: int) -> int:
    """A 32-bit seed fixed by (campaign seed, backend, shard); stable across processes and machines."""
    return zlib.crc32(f"{campaign_seed}/{backend}/{shard}".encode())


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker needs to know, whoever starts it (local pool or Ray)."""

    seed: int = 0  # the campaign's --seed: with backend and shard, fixes every drawn case
    limits: dict = field(default_factory=dict)  # fuzz.limits.Limits fields
    specs: tuple[str, ...] = ()  # --backend-spec modules to load
    threads: int = 1  # torch CPU threads per worker
    oracle_cpu_max: int = 1 << 16  # score elements up to which the oracle runs on the CPU (see fuzz.compare)
    shrink_seconds: float = 20.0  # time one shrink may take before it keeps the smallest case so far
    shrink_examples: int = 300  # shrink evaluations before the same
    compile_slices: bool = False  # JIT backends' shards draw from one compile slice each (campaign.scheduler)
    cache_dir: str | None = None  # the JIT libraries' compile caches (campaign.caches); None: not set here
    compile_share: float = 0.2  # JIT builds' share of the workers (campaign.claims); 1: every case compiles where drawn
    compile_slots: int = 1  # builds at once at the start: the warm-up share x the host's workers (campaign.claims)
    slots_dir: str | None = None  # the campaign's compile slot locks (campaign.claims); None: the cache folder's
    profile_dir: str | None = None  # --profile: each worker's cProfile statistics go there (campaign.profiling)
    keep_freed_memory: bool = False  # malloc keeps what a case frees (campaign.allocator): a host without GPUs

    def to_dict(self) -> dict:
        return {"seed": self.seed, "limits": self.limits, "specs": list(self.specs), "threads": self.threads,
                "oracle_cpu_max": self.oracle_cpu_max, "shrink_seconds": self.shrink_seconds,
                "shrink_examples": self.shrink_examples, "compile_slices": self.compile_slices,
                "cache_dir": self.cache_dir, "compile_share": self.compile_share,
                "compile_slots": self.compile_slots, "slots_dir": self.slots_dir,
                "profile_dir": self.profile_dir, "keep_freed_memory": self.keep_freed_memory}

    @classmethod
    def from_dict(cls, d: dict) -> "WorkerConfig":
        default = cls()  # a missing field keeps the dataclass default, written once above
        return cls(seed=d.get("seed", default.seed), limits=d.get("limits") or {}, specs=tuple(d.get("specs") or ()),
                   threads=d.get("threads", default.threads), oracle_cpu_max=d.get("oracle_cpu_max", default.oracle_cpu_max),
                   shrink_seconds=d.get("shrink_seconds", default.shrink_seconds),
                   shrink_examples=d.get("shrink_examples", default.shrink_examples),
                   compile_slices=d.get("compile_slices", default.compile_slices),
                   cache_dir=d.get("cache_dir", default.cache_dir),
                   compile_share=d.get("compile_share", default.compile_share),
                   compile_slots=d.get("compile_slots", default.compile_slots),
                   slots_dir=d.get("slots_dir", default.slots_dir),
                   profile_dir=d.get("profile_dir", default.profile_dir),
                   keep_freed_memory=d.get("keep_freed_memory", default.keep_freed_memory))


def cores() -> int:
    """CPU cores this process may use (its affinity: `taskset` or a container's cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
