"""Compile caches in one folder (campaign/caches.py): workers see every library's variable under --cache-dir before
anything is imported, a user's own setting wins, MAX_JOBS is the worker's share of the cores, and `attnref cache`
shows and clears it."""
from __future__ import annotations

import json
import subprocess
import sys

from campaign import caches
from campaign.engine import CampaignConfig, run_campaign


def test_workers_see_the_cache_folder_and_keep_a_user_setting(tmp_path, monkeypatch):
    for variable in caches.cache_environment(tmp_path, jobs=1):  # restored after the test: the driver sets them too
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    cfg = CampaignConfig(out=tmp_path / "out", backends=["test-cache-env"], examples=4, workers=2, progress=False,
                         specs=("tests.campaign.cache_env:backends",), cache_dir=str(tmp_path / "cache"),
                         replay_saved=False)
    result = run_campaign(cfg)
    notes = [json.loads(r["notes"]) for r in result.rows if r.get("notes")]
    assert notes, "no row reached the kernel"
    root = (tmp_path / "cache").resolve()
    for seen in notes:
        assert seen["TRITON_CACHE_DIR"] == str(tmp_path / "mine")  # the user's own
        assert seen["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor")
        assert seen["FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"] == str(root / "fa4")
        assert seen["FLASHINFER_WORKSPACE_BASE"] == str(root / "flashinfer")
        assert int(seen["MAX_JOBS"]) >= 1


def test_the_default_folder_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNREF_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert caches.cache_root() == tmp_path.resolve() / "attnref"
    monkeypatch.setenv("ATTNREF_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert caches.cache_root() == (tmp_path / "elsewhere").resolve()
    assert caches.cache_root(tmp_path / "given") == (tmp_path / "given").resolve()


def test_attnref_cache_shows_and_clears_only_the_library_caches(tmp_path):
    (tmp_path / "triton" / "ab").mkdir(parents=True)
    (tmp_path / "triton" / "ab" / "kernel.cubin").write_bytes(b"x" * 2048)
    (tmp_path / "notes.txt").write_text("the user's")
    (tmp_path / "compile-keys" / "fa4-varlen").mkdir(parents=True)  # campaign.claims' built markers go too
    (tmp_path / "compile-keys" / "fa4-varlen" / "0123.built").write_text('["float16", 64]')
    (tmp_path / "prefixes").mkdir()  # campaign.drawing.PrefixStore's prefixes go too
    (tmp_path / "prefixes" / "0123.json").write_text("[]")
    run = lambda *args: subprocess.run([sys.executable, "-m", "cli", "cache", "--cache-dir", str(tmp_path), *args],  # noqa: E731
                                       capture_output=True, text=True, check=True).stdout
    shown = run()
    assert "triton" in shown and "1 files" in shown.split("triton")[1].splitlines()[0]
    assert "compile-keys" in shown and "1 files" in shown.split("compile-keys")[1].splitlines()[0]
    assert "prefixes" in shown and "1 files" in shown.split("prefixes")[1].splitlines()[0]
    assert "cleared 0.0 MiB" in run("--clear")
    assert not (tmp_path / "triton").exists() and (tmp_path / "notes.txt").exists()
    assert not (tmp_path / "compile-keys").exists() and not (tmp_path / "prefixes").exists()
    assert "0 files" in run().split("triton")[1].splitlines()[0]
