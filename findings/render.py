"""FINDINGS.md, rendered from the catalog: `attnref findings > FINDINGS.md` (a test fails when they differ)."""
from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Iterable

from .catalog import FA4_ROWS, FLASHINFER_ROWS, TORCH, VLLM_ROWS
from .model import CASES_DIR, RESULTS_DIR, Entry, Kind
from .other import CONVENTIONS, HARNESS, LIMITATIONS, OPEN

DEFECTS = (("torch", TORCH), ("FlashAttention-4", FA4_ROWS), ("FlashInfer", FLASHINFER_ROWS), ("vLLM", VLLM_ROWS))
APART = ((Kind.CONVENTION, "API conventions (not bugs: each backend declares its own)", CONVENTIONS),
         (Kind.LIMITATION, "Library limitations (the declaration narrowed, with the reason)", LIMITATIONS),
         (Kind.OPEN, "Open cases (not yet separated from tolerance or matched to a mechanism)", OPEN),
         (Kind.HARNESS, "attnref's own defects (fixed; the cases stay as regression cases)", HARNESS))


def all_entries() -> tuple[Entry, ...]:
    return tuple(e for _, rows in DEFECTS for e in rows) + tuple(e for _, _, rows in APART for e in rows)


def case_backend(name: str, root: str = ".") -> str:
    with open(os.path.join(root, CASES_DIR, name)) as f:
        return json.load(f)["backend"]


RUNS_DIR = f"{RESULTS_DIR}/repro/runs"


def _started(path: str) -> datetime.datetime:
    """When a run log's run began: the `date` line tools/device-info.sh writes (the file's name sorts no better)."""
    with open(path) as f:
        for line in f:
            try:
                return datetime.datetime.strptime(line.strip(), "%a %b %d %I:%M:%S %p %Z %Y")
            except ValueError:
                continue
    return datetime.datetime.min


def recorded_runs(root: str = ".") -> dict[str, tuple[str, str]]:
    """script name -> (exit status, run log file) from the committed GPU runs of tools/gpu-repro.sh: a script's latest
    run, except that a run cut by the timeout (124: it says nothing about the kernel) never replaces a finished one."""
    runs: dict[str, tuple[str, str]] = {}
    folder = os.path.join(root, RUNS_DIR)
    logs = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for log in sorted(logs, key=lambda name: _started(os.path.join(folder, name))):
        with open(os.path.join(folder, log)) as f:
            for line in f:
                parts = line.split()
                if len(parts) > 1 and parts[0].endswith(".py") and parts[1].startswith("rc="):
                    rc = parts[1][3:]
                    if rc != "124" or runs.get(parts[0], ("124",))[0] == "124":
                        runs[parts[0]] = (rc, log)
    return runs


def _ran(script: str, runs: dict[str, tuple[str, str]], defect: bool = True) -> str:
    if script not in runs:
        return "not yet run on a GPU"
    rc, log = runs[script]
    what = "" if not defect else (", reproduces" if rc not in ("0", "124") else ", does not reproduce standalone")
    return f"exit {rc}{what} ([run]({RUNS_DIR}/{log}))"


def repro_command(entry: Entry, runs: dict[str, tuple[str, str]], root: str = ".") -> str:
    """The committed script, else `attnref repro` on the first case it can write (the first whose recorded
    run reproduces, if any), else the replay command; each with its recorded GPU run (`recorded_runs`)."""
    if entry.repro:
        return f"[{entry.repro}]({RESULTS_DIR}/repro/{entry.repro}): {_ran('committed-' + entry.repro, runs)}"
    from reference.case import Case
    from reports.repro import ReproUnsupported, write_repro

    first = None
    for name in entry.cases:
        with open(os.path.join(root, CASES_DIR, name)) as f:
            saved = json.load(f)
        try:
            write_repro(Case.from_dict(saved["case"]), saved["backend"])
        except (ReproUnsupported, ValueError):
            continue
        first = first or name
        if runs.get(name.removesuffix(".json") + ".py", ("0",))[0] not in ("0", "124"):
            first = name
            break
    if first is not None:
        script = first.removesuffix(".json") + ".py"
        return f"`attnref repro {CASES_DIR}/{first}`: {_ran(script, runs, entry.kind == Kind.DEFECT)}"
    if not entry.cases:
        return "–"
    if entry.kind == Kind.HARNESS:  # attnref's own kernel: replaying the case runs it and judges it
        return f"`attnref replay {CASES_DIR}/{entry.cases[0]}` (attnref's own kernel; exit 0 since the fix)"
    return f"none yet: `attnref replay {CASES_DIR}/{entry.cases[0]}`"


def _cases(entry: Entry) -> str:
    return "<br>".join(f"[{n.removesuffix('.json')}]({CASES_DIR}/{n})" for n in entry.cases) or "–"


def _results(entry: Entry) -> str:
    return f"[{entry.results}]({RESULTS_DIR}/{entry.results})" if entry.results else "–"


def _table(rows: Iterable[Entry], repro: Callable[[Entry], str]) -> list[str]:
    head = "| | entry point | what | minimal cases | reproducer | measured | status | analysis |"
    out = [head, "|" + "---|" * 8]
    for e in rows:
        anchor = f'<a id="{e.key}"></a>**{e.key}**'
        out.append(f"| {anchor} | {e.library}: {e.entry} | {e.what} | {_cases(e)} | {repro(e)} | {e.device} | "
                   f"{e.status} | {_results(e)} |")
    return out


def render(repro: Callable[[Entry], str] | None = None) -> str:
    if repro is None:
        runs = recorded_runs()  # read once: every row looks its scripts up in them
        repro = lambda entry: repro_command(entry, runs)  # noqa: E731
    defects = sum(len(rows) for _, rows in DEFECTS)
    cases = sum(len(e.cases) for e in all_entries())
    lines = [
        "# What attnref found",
        "",
        f"{defects} defects in released attention kernels, each with its minimal case (a JSON `Case` that "
        "`attnref replay` runs bit for bit) and a reproducer: a committed script, or the one `attnref repro` writes "
        "(torch and the library under test only; exit 1 while the kernel is off). Apart: the conventions on which "
        "libraries disagree, library limitations, open cases and attnref's own fixed defects. "
        f"Every one of the {cases} committed cases belongs to one row.",
        "",
        "Rendered from `findings/` by `attnref findings`; `tests/findings/test_catalog.py` fails when this file, "
        "the committed cases (`benchmarks/results/cases/`) and the known-failure ledger (`fuzz/ledger.py`) drift "
        "apart. \"in the ledger\": campaigns mark its rows known (exit 0) and flag a passing one as fixed.",
        "",
    ]
    for title, rows in DEFECTS:
        lines += [f"## {title}", "", *_table(rows, repro), ""]
    for _, title, rows in APART:
        lines += [f"## {title}", "", *_table(rows, repro), ""]
    moved = [(case, e.key, why) for e in all_entries() for case, why in e.moved]
    lines += ["## Cases that replay outside their backend's declaration today", "",
              "| case | row | why the declaration moved |", "|---|---|---|"]
    lines += [f"| {case} | [{key}](#{key}) | {why} |" for case, key, why in moved]
    return "\n".join(lines) + "\n"
