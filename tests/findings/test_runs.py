"""Which recorded GPU run FINDINGS.md shows for a script: the latest by the log's own start time, never a timeout
over a finished run."""
from __future__ import annotations

from findings.render import RUNS_DIR, recorded_runs


def _log(folder, name: str, started: str, lines: list[str]) -> None:
    (folder / name).write_text("\n".join(["# header", "torch 2.11.0+cu130", started] + lines) + "\n")


def test_the_latest_finished_run_counts_whatever_the_file_names(tmp_path):
    folder = tmp_path / RUNS_DIR
    folder.mkdir(parents=True)
    # "h100-x.txt" sorts after "h100-x-later.txt" ('.' > '-'), though it ran first
    _log(folder, "h100-x.txt", "Wed Nov 25 05:22:21 AM UTC 2026",
         ["a.py   rc=0   5s  OK", "b.py   rc=1   5s  MISMATCH", "c.py   rc=124  200s  building"])
    _log(folder, "h100-x-later.txt", "Wed Nov 25 07:16:25 AM UTC 2026",
         ["a.py   rc=1   5s  MISMATCH", "b.py   rc=124  200s  building", "c.py   rc=124  200s  building"])
    runs = recorded_runs(str(tmp_path))
    assert runs["a.py"] == ("1", "h100-x-later.txt")  # the later run, though its file sorts first
    assert runs["b.py"] == ("1", "h100-x.txt")  # a timeout says nothing about the kernel
    assert runs["c.py"][0] == "124"  # only timeouts: shown as such
