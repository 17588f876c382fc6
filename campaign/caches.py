"""The JIT libraries' compile caches, kept in one folder so a second campaign on the machine starts warm.

Each library keeps what it compiled where one environment variable says (read when the library is imported or
first compiles, so workers set them before importing anything):

| library | variable | its default |
|---|---|---|
| Triton (vLLM's and xformers' Triton kernels, flex) | TRITON_CACHE_DIR | ~/.triton/cache |
| torch inductor (torch.compile'd flex) | TORCHINDUCTOR_CACHE_DIR | /tmp/torchinductor_$USER |
| FlashAttention-4 (CuTe DSL) | FLASH_ATTENTION_CUTE_DSL_CACHE_DIR (with ..._ENABLED=1) | /tmp/$USER/flash_attention_cute_dsl_cache |
| FlashInfer (nvcc JIT) | FLASHINFER_WORKSPACE_BASE (it adds .cache/flashinfer/) | ~ |

The folder is `--cache-dir`, else $ATTNREF_CACHE_DIR, else $XDG_CACHE_HOME/attnref, else ~/.cache/attnref; a
variable the user set already is kept. MAX_JOBS (read by torch's cpp_extension, and so by FlashInfer's ninja
builds) is set to the worker's share of the cores, so the campaign's nvcc builds stay within the cores it was
given (one FlashInfer campaign's builds took a torch campaign beside it from 160 to under 10 examples/s).
The folder also holds attnref's own record of which compile keys were built (`compile-keys/`, campaign.claims), so a
second campaign knows from its start which modules exist, and each strategy's fixed prefix of cases (`prefixes/`,
campaign.drawing.PrefixStore), so its workers do not draw it again. `attnref cache` shows the folder and
`attnref cache --clear` empties it.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

# (subfolder, variable): the folder each library's variable points at
LIBRARY_CACHES = (("triton", "TRITON_CACHE_DIR"), ("inductor", "TORCHINDUCTOR_CACHE_DIR"),
                  ("fa4", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"), ("flashinfer", "FLASHINFER_WORKSPACE_BASE"))
KEYS_FOLDER = "compile-keys"  # campaign.claims: key locks and built markers (no library reads it)
PREFIXES_FOLDER = "prefixes"  # campaign.drawing.PrefixStore: each strategy's fixed prefix of cases
ATTNREF_FOLDERS = ((KEYS_FOLDER, "attnref: built compile keys"), (PREFIXES_FOLDER, "attnref: fixed prefixes of cases"))


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The campaign's cache folder: the argument, $ATTNREF_CACHE_DIR, $XDG_CACHE_HOME/attnref or ~/.cache/attnref."""
    if cache_dir:
        return Path(cache_dir).expanduser().resolve()
    if os.environ.get("ATTNREF_CACHE_DIR"):
        return Path(os.environ["ATTNREF_CACHE_DIR"]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).resolve() / "attnref"


def cache_environment(root: Path, jobs: int | None = None) -> dict[str, str]:
    """The variables set (unless already set) for the caches under `root` and, given `jobs`, the build jobs."""
    env = {variable: str(root / sub) for sub, variable in LIBRARY_CACHES}
    env["FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"] = "1"  # FA4 keeps no disk cache without it
    if jobs is not None:
        env["MAX_JOBS"] = str(max(1, jobs))
    return env


def use_caches(root: str | os.PathLike | None, jobs: int | None = None) -> dict[str, str]:
    """Set the cache variables in this process (a user's own settings win); returns what is in force. The driver
    calls it first thing (its workers inherit the variables, and torch's inductor, once imported, would otherwise
    fill in its own default), each worker again with its share of the cores as `jobs`."""
    wanted = cache_environment(cache_root(root), jobs)
    for variable, value in wanted.items():
        os.environ.setdefault(variable, value)
    return {variable: os.environ[variable] for variable in wanted}


def folder_size(path: Path) -> tuple[int, int]:
    """(bytes, files) under path; (0, 0) where it does not exist."""
    total = files = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                pass
    return total, files


def describe(root: Path) -> list[str]:
    """One line per library cache: its folder, size and file count."""
    lines = [f"cache folder: {root}"]
    for sub, variable in LIBRARY_CACHES:
        size, files = folder_size(root / sub)
        lines.append(f"  {sub:10} {size / 2**20:9.1f} MiB  {files:6} files  ({variable})")
    for sub, what in ATTNREF_FOLDERS:
        size, files = folder_size(root / sub)
        lines.append(f"  {sub:10} {size / 2**20:9.1f} MiB  {files:6} files  ({what})")
    return lines


def clear(root: Path) -> int:
    """Remove every library cache under root; returns the bytes freed. Other files in root are left alone."""
    freed = 0
    for sub in [sub for sub, _ in LIBRARY_CACHES] + [sub for sub, _ in ATTNREF_FOLDERS]:
        freed += folder_size(root / sub)[0]
        shutil.rmtree(root / sub, ignore_errors=True)
    return freed
