"""tools/gpu-bg.sh, the device's campaigns across calls, run here on a CPU backend: started in its own
process session, stopped with SIGINT by `pack`, flushed, and brought back as two files (a device call returns
8 at most: a 2026-11-24 H100 run lost one campaign's files to that)."""
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
TOOLS = ("setsid", "pgrep", "pkill", "tar", "xz")


@pytest.fixture
def name():
    """The campaign's name: gpu-bg.sh keeps its pid, log and links as /tmp/bg-NAME*, removed afterwards."""
    name = f"t{os.getpid()}"
    yield name
    pid = Path(f"/tmp/bg-{name}.pid")
    if pid.exists():  # a failed test must not leave its campaign running
        subprocess.run(["pkill", "-KILL", "-s", pid.read_text().strip()], capture_output=True)
    for leftover in Path("/tmp").glob(f"bg-{name}*"):
        shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()


@pytest.mark.skipif(not all(shutil.which(t) for t in TOOLS), reason=f"needs {', '.join(TOOLS)} (util-linux, procps)")
def test_a_background_campaign_is_stopped_flushed_and_packed_into_two_files(tmp_path, name):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", OUT=str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    bg = ["bash", "tools/gpu-bg.sh"]
    start = subprocess.run([*bg, "start", name, f"RES={tmp_path / 'res'}", "PARTS=torch", "TIME_TORCH=300",
                            "BUDGET=600", "WORKERS=1"], cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert start.returncode == 0 and "started" in start.stdout, start.stderr
    pid = Path(f"/tmp/bg-{name}.pid").read_text().strip()
    rows = tmp_path / "res" / "rows.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (rows.exists() and rows.stat().st_size > 0):
        time.sleep(1)
    assert rows.exists() and rows.stat().st_size > 0, "the background campaign wrote no row"
    pack = subprocess.run([*bg, "pack", name, "BUDGET=20"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert pack.returncode == 0, pack.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"{name}-log.txt", f"{name}-results.tar.xz"]
    assert subprocess.run(["pgrep", "-s", pid], capture_output=True).returncode == 1, "a process of the campaign is left"
    with tarfile.open(tmp_path / "out" / f"{name}-results.tar.xz") as tar:
        packed = tar.extractfile("res/rows.jsonl").read().decode().splitlines()
    assert packed and len(packed) == len(rows.read_text().splitlines())
    assert "exit 130" in (tmp_path / "out" / f"{name}-log.txt").read_text()  # SIGINT: flushed, not killed
