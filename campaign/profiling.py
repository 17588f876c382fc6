"""Where a campaign's processes spend their time, call by call: `attnref fuzz --profile DIR`.

Each worker runs its tasks under cProfile and writes its statistics to DIR/worker-PID.prof after every task, so a
worker the campaign stops mid-task keeps its earlier tasks' figures; the driver writes DIR/driver.prof when the
campaign ends. `profile_table(DIR)` merges the workers' files (pstats) into Markdown: the calls with the most time
of their own, and that time by family (hypothesis, torch's operators, the oracle, the judge, ...). A worker's wait
for its next task is not profiled. cProfile slows Python-heavy code, so time a campaign without it and read the
profile for shares. Ray actors write to DIR on their own node.
"""
from __future__ import annotations

import cProfile
import os
import pstats
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

WORKER_GLOB = "worker-*.prof"
DRIVER_FILE = "driver.prof"

# The repository's packages by concept (a file outside any installed package, whatever the checkout's path), then the
# libraries a worker spends its time in; a built-in by its name
REPOSITORY = (("/reference/", "oracle, inputs (reference/)"), ("/fuzz/", "judge, blind check, strategies (fuzz/)"),
              ("/backends/", "backend wrappers (backends/)"), ("/campaign/", "campaign worker (campaign/)"))
LIBRARIES = (("hypothesis/", "hypothesis"), ("torch/", "torch (Python)"))  # installed packages' folders
TORCH_OPERATORS = "torch operators (C++)"
OTHER = "other (Python, pipes, builtins)"


class TaskProfiler:
    """One worker process's profile, written after every task; a no-op without a folder."""

    def __init__(self, folder: str | None) -> None:
        self.folder = Path(folder) if folder else None
        self.profile = cProfile.Profile() if folder else None

    @contextmanager
    def task(self) -> Iterator[None]:
        if self.profile is None:
            yield
            return
        with _profiling(self.profile, self.folder / f"worker-{os.getpid()}.prof"):
            yield


@contextmanager
def driver_profile(folder: str | None) -> Iterator[None]:
    """The driver's own profile (reading messages, writing rows, scheduling), written when the block ends."""
    if not folder:
        yield
        return
    with _profiling(cProfile.Profile(), Path(folder) / DRIVER_FILE):
        yield


@contextmanager
def _profiling(profile: cProfile.Profile, path: Path) -> Iterator[None]:
    """`profile` on for the block, its statistics so far written to `path` when the block ends (also by an error)."""
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        _dump(profile, path)


def _dump(profile: cProfile.Profile, path: Path) -> None:
    """Write the statistics; a profile that cannot be written (a full disk) costs its figures, not the campaign."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(path)
    except OSError:
        pass


def family(filename: str, name: str) -> str:
    """The family of a profiled function, from its file (or, for a built-in, its name)."""
    if filename == "~":
        return TORCH_OPERATORS if "torch." in name else OTHER
    path = filename.replace("\\", "/")
    if "-packages/" in path:  # site-packages or dist-packages
        package = path.split("-packages/", 1)[1]
        return next((label for folder, label in LIBRARIES if package.startswith(folder)), OTHER)
    return next((label for marker, label in REPOSITORY if marker in path), OTHER)


def _label(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    parts = Path(filename).parts
    short = "/".join(parts[-2:]) if len(parts) > 1 else filename
    return f"{short}:{line} {name}"


def merged(files: list[Path]) -> pstats.Stats:
    stats = pstats.Stats(str(files[0]))
    for f in files[1:]:
        stats.add(str(f))
    return stats


def profile_table(folder: Path, top: int = 25, files: str = WORKER_GLOB) -> str:
    """Markdown: the merged profiles' own time by family, and the `top` calls with the most own time."""
    found = sorted(Path(folder).glob(files))
    if not found:
        return f"no profiles ({files}) in {folder}\n"
    table = merged(found).stats  # {func: (primitive calls, calls, own time, cumulative time, callers)}
    total = sum(own for _, _, own, _, _ in table.values()) or 1.0
    by_family: Counter[str] = Counter()
    for (filename, line, name), (_, _, own, _, _) in table.items():
        by_family[family(filename, name)] += own
    lines = [f"{len(found)} processes, {total:.1f} s profiled (own time summed)\n",
             "| family | own time (s) | share |", "|---|---|---|"]
    lines += [f"| {label} | {s:.1f} | {100 * s / total:.1f} % |" for label, s in by_family.most_common()]
    lines += ["", "| call | calls | own time (s) | share | cumulative (s) |", "|---|---|---|---|---|"]
    ranked = sorted(table.items(), key=lambda kv: -kv[1][2])[:top]
    lines += [f"| `{_label(func)}` | {calls:,} | {own:.2f} | {100 * own / total:.1f} % | {cum:.2f} |"
              for func, (_, calls, own, cum, _) in ranked]
    return "\n".join(lines) + "\n"
