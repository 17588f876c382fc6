"""Which worker builds a JIT compile key, and how many build or load modules at once: file locks the workers of one
host share.

A campaign's workers are separate processes (local or Ray actors) that compile into one cache folder
(campaign.caches). Without coordination two workers that draw the same key build it side by side, or one waits out
the other's build on the library's own lock. Three things live on disk, under the cache folder and the campaign's
folder:

- a key lock per (backend, compile key): the worker holding it builds the key; another that draws the key meanwhile
  defers the case instead of waiting for the same build;
- a built marker per key, written once the key's first call returned: any worker of the host (and a later campaign
  over the same cache) knows the module exists without a round trip through the driver;
- compile slots, `share x workers` of them per campaign (a larger share in its first minutes: compile_slots_at): a
  build, and a load of a built key into a process that has not run it (unless the backend loads in process), holds
  one, so first calls take at most that share of the workers. Measured on an H100
  (benchmarks/results/campaigns/jit-untold-h100-2026-11-26.md): letting each worker build one key per backend before
  any was built kept 14-15 long FlashInfer first calls (builds of 5-400 s) running at once in the first minutes, and
  700 of FA4's 1,000 first calls took 2-5 s each (most of them new variants within a key: Backend.jit_variant).

The OS drops a dead process's locks, so a worker killed mid-build frees its key and its slot.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

from fuzz.verdicts import Verdict

# verdicts of a first call that may not have built its module
NOT_BUILT = (Verdict.CRASH.value, Verdict.UNSUPPORTED.value, Verdict.TIMEOUT.value)


def built_by(verdict: str | None) -> bool:
    """Whether a row with this verdict shows its module built: the kernel returned (refused, crashed or hung first
    calls may have built nothing; a module marked built that is not lets other workers build it unclaimed, side by
    side on the library's own lock)."""
    return verdict is not None and verdict not in NOT_BUILT


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _try_lock(path: Path) -> int | None:
    """An exclusive lock on `path` (created if needed) as an open descriptor, or None while another process holds it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:  # the first lock of its folder
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing drops the flock


class Claim:
    """A held key lock and, when one was needed, a compile slot; `done` writes the built marker and lets both go."""

    def __init__(self, claims: "CompileClaims", backend: str, key: str, key_fd: int | None, slot_fd: int | None,
                 covers: str = "") -> None:
        self.claims, self.backend, self.key, self.covers = claims, backend, key, covers or key
        self.key_fd, self.slot_fd = key_fd, slot_fd

    def done(self, built: bool) -> None:
        if built and self.key:
            self.claims.mark_built(self.backend, self.key, self.covers)
        _unlock(self.slot_fd)
        _unlock(self.key_fd)
        self.key_fd = self.slot_fd = None


# The driver's compile slots as they stand (campaign.budget), in the slots folder: a claim takes at most that many. A
# task's own count is the one of the moment it went out, and a generation task may build for minutes: with the
# budget at one slot, FlashInfer workers still ran four builds at once, one worker five in one task
# (campaigns/jit-untold-budget-h200-2026-11-27.md).
BUDGET_FILE = "budget"
# Likewise the backends whose builds would outlast the campaign, or, in the warm-up, the warm-up
# (campaign.compile_driving): a running task's first calls build nothing of theirs from then on, where its own `builds`
# flag still says yes.
LATE_FILE = "late"
# The backends whose new builds pause (campaign.budget's allowance spent): generation's first calls build nothing of
# theirs; the driver's compile tasks still do (it hands them out only for keys that bring new values).
PAUSED_FILE = "paused"
# A compile task of a starved backend (campaign.compiles.FirstCalls) that finds every slot busy waits up to
# SLOT_WAIT_S for one, holding this lock shared; meanwhile generation's first calls take no slot. They had won every
# freed slot before: on an H200, fa4-varlen's first calls (2-12 s each, 2.7-3.5 slots busy in minutes 1-2) left
# fa4-paged no slot from 84 s on, and no row after it (campaigns/jit-untold-late-builds-h200-2026-11-27.md).
WANT_FILE = "want.lock"
SLOT_WAIT_S = 20.0


def _publish(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_budget(slots_root: str | os.PathLike, slots: int) -> None:
    """Publish the driver's current compile slots to every worker's next claim."""
    _publish(Path(slots_root) / BUDGET_FILE, str(slots))


def write_late(slots_root: str | os.PathLike, backends: set[str]) -> None:
    """Publish the backends no worker's claim may build for any more (one name a line)."""
    _publish(Path(slots_root) / LATE_FILE, "".join(f"{b}\n" for b in sorted(backends)))


def write_paused(slots_root: str | os.PathLike, backends: set[str]) -> None:
    """Publish the backends only compile tasks may build for now (one name a line)."""
    _publish(Path(slots_root) / PAUSED_FILE, "".join(f"{b}\n" for b in sorted(backends)))


class CompileClaims:
    """Key locks and built markers under `keys_root` (the cache folder), `slots` compile slots under `slots_root`
    (the campaign's folder)."""

    def __init__(self, keys_root: str | os.PathLike, slots_root: str | os.PathLike, slots: int) -> None:
        self.keys_root, self.slots_root = Path(keys_root), Path(slots_root)
        self.slots = max(1, slots)
        self._built: set[tuple[str, str]] = set()  # markers seen: a marker is never taken back during a campaign

    def _paths(self, backend: str, key: str, space: str = "") -> tuple[Path, Path]:
        """(the key's build lock, in `space` when backends share their modules (Backend.jit_module_space); its built
        marker, the backend's own)."""
        digest = hashlib.sha1(key.encode()).hexdigest()[:16]
        marker = self.keys_root / _safe(backend) / f"{digest}.built"
        lock_folder = self.keys_root / _safe(space) if space else marker.parent
        return lock_folder / f"{digest}.lock", marker

    def is_built(self, backend: str, key: str) -> bool:
        if (backend, key) in self._built:
            return True
        if self._paths(backend, key)[1].exists():
            self._built.add((backend, key))
            return True
        return False

    def mark_built(self, backend: str, key: str, covers: str = "") -> None:
        """`key` (a compile key, or a finer variant of compile key `covers`: Backend.jit_variant) is built."""
        marker = self._paths(backend, key)[1]
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            tmp = marker.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(f"{covers or key}\n{key}")  # the compile key, then the module (built_modules)
            os.replace(tmp, marker)
        self._built.add((backend, key))

    def limit(self) -> int:
        """The slots a claim may take now: the task's count, or fewer where the driver's budget fell since."""
        try:
            return max(1, min(self.slots, int((self.slots_root / BUDGET_FILE).read_text())))
        except (OSError, ValueError):
            return self.slots

    def late(self) -> frozenset[str]:
        """The backends the driver published as late (write_late): none while it published nothing."""
        return self._names(LATE_FILE)

    def paused(self) -> frozenset[str]:
        """The backends the driver published as paused (write_paused): none while it published nothing."""
        return self._names(PAUSED_FILE)

    def _names(self, file: str) -> frozenset[str]:
        try:
            return frozenset((self.slots_root / file).read_text().split())
        except OSError:
            return frozenset()

    def _free_slot(self) -> int | None:
        for i in range(self.limit()):
            fd = _try_lock(self.slots_root / f"slot-{i}.lock")
            if fd is not None:
                return fd
        return None

    def someone_waits(self) -> bool:
        """Whether a compile task waits for a slot (it holds the want lock shared: no exclusive lock to be had)."""
        fd = _try_lock(self.slots_root / WANT_FILE)
        _unlock(fd)
        return fd is None

    def _slot(self, wait_s: float = 0.0) -> int | None:
        """A free slot now, none while a compile task waits for one; with `wait_s` (a compile task) the next one to
        free within that many seconds, before any claim that does not wait."""
        if wait_s <= 0:
            return None if self.someone_waits() else self._free_slot()
        self.slots_root.mkdir(parents=True, exist_ok=True)
        want = os.open(self.slots_root / WANT_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(want, fcntl.LOCK_SH)
            until = time.monotonic() + wait_s
            while (fd := self._free_slot()) is None and time.monotonic() < until:
                time.sleep(0.05)
            return fd
        finally:
            os.close(want)

    def claim(self, backend: str, key: str, covers: str = "", space: str = "", wait_s: float = 0.0,
              compile_task: bool = False) -> Claim | None:
        """The right to build `key` (of compile key `covers` when a variant) now, its lock (in `space`: shared modules)
        and a slot (waited for up to `wait_s`: `_slot`), or None: another process builds it, every slot is busy, the
        backend's builds would outlast the campaign (write_late), or they pause and this is no `compile_task`
        (write_paused)."""
        if backend in self.late() or (not compile_task and backend in self.paused()):
            return None
        lock, _ = self._paths(backend, key, space)
        key_fd = _try_lock(lock)
        if key_fd is None:
            return None
        slot_fd = self._slot(wait_s)
        if slot_fd is None:
            _unlock(key_fd)
            return None
        return Claim(self, backend, key, key_fd, slot_fd, covers)

    def slot_only(self, wait_s: float = 0.0) -> Claim | None:
        """A compile slot alone, to load a built key's module into this process (no key lock: loads do not collide)."""
        slot_fd = self._slot(wait_s)
        return None if slot_fd is None else Claim(self, "", "", None, slot_fd)

    def wait_claim(self, backend: str, key: str, covers: str = "", until: float | None = None,
                   poll: float = 0.25, space: str = "") -> Claim | None:
        """Block until the key is free (None when it turned out built meanwhile, or at `until`): a compile task's
        worker waits out another's build of the same key instead of building it twice."""
        lock, _ = self._paths(backend, key, space)
        while True:
            if self.is_built(backend, key):
                return None
            key_fd = _try_lock(lock)
            if key_fd is not None:
                if self.is_built(backend, key):
                    _unlock(key_fd)
                    return None
                return Claim(self, backend, key, key_fd, None, covers)
            if until is not None and time.time() >= until:
                return None
            time.sleep(poll)


def built_modules(keys_root: str | os.PathLike, backend: str) -> set[tuple[str, str]]:
    """(compile key, module) of every module of `backend` some process over this cache built, the module being the key
    or a finer variant of it (a warm campaign starts from them). A marker of one line names a key built as itself."""
    folder = Path(keys_root) / _safe(backend)
    out = set()
    for marker in folder.glob("*.built") if folder.is_dir() else ():
        try:
            key, _, unit = marker.read_text().partition("\n")
        except OSError:
            continue
        out.add((key, unit or key))
    return out


def compile_slots(share: float, workers: int) -> int:
    """How many first calls of JIT modules a campaign of `workers` runs at once: its compile share of them, at least
    one."""
    return max(1, round(share * workers))


# A cold campaign has nothing built in its first minutes, so builds get at least WARMUP_SHARE of the workers for
# WARMUP_S; after that the campaign's own share (--compile-share, 0.2 by default) is the ceiling of campaign.budget's
# slots, held down while evaluation is under its floor. Measured on an H100 with 0.3
# throughout: first calls took 28-35 % of worker time after minute 2 (5 slots of 16 workers, nearly always busy), so
# evaluation could not reach 70 % even with no harness time at all
# (benchmarks/results/campaigns/jit-untold-h100-2026-11-26.md).
WARMUP_S = 120.0
WARMUP_SHARE = 0.3


def compile_slots_at(elapsed: float, share: float, workers: int) -> int:
    """Compile slots `elapsed` seconds into a campaign whose compile share is `share`: the warm-up's share first."""
    return compile_slots(share if elapsed >= WARMUP_S else max(share, WARMUP_SHARE), workers)
