"""The row store: rows.jsonl written by one writer (the campaign's driver), minimal cases beside it, and what a case
file holds (`case_payload`).

Workers never write files: they send rows and case payloads to the driver, which appends each row
as one line and flushes it, so rows from concurrent workers (local or on Ray nodes) never
interleave and a killed campaign keeps every row written. A line torn by a kill mid-write is
skipped on reading. A full disk or an unwritable directory raises `StoreError` with one line.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store itself needs no torch
    from fuzz.compare import Evaluation

ROWS = "rows.jsonl"


class StoreError(RuntimeError):
    """The results directory cannot be written (full disk, permissions); the message says which."""


def rows_path(out: Path) -> Path:
    return Path(out) / ROWS


def read_jsonl(path: Path) -> list[dict]:
    """Every complete JSON object of a .jsonl file, in order; a line cut by a kill is skipped; no file: []."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def read_rows(out: Path) -> list[dict]:
    """Every complete row of out/rows.jsonl, in order; a line cut by a kill is skipped."""
    return read_jsonl(rows_path(out))


def _why(e: OSError, path: Path) -> str:
    if e.errno == errno.ENOSPC:
        return f"no space left on the device holding {path}"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: permission denied or read-only file system"
    return f"cannot write {path}: {e.strerror or e}"


def prepare(out: Path) -> None:
    """Create out/, out/cases and out/logs, or raise StoreError saying why not."""
    try:
        for sub in ("cases", "logs"):
            (Path(out) / sub).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(_why(e, Path(out))) from None


class RowStore:
    """Appends rows to out/rows.jsonl (fresh, or kept with resume) and writes case files."""

    def __init__(self, out: Path, resume: bool = False) -> None:
        self.out = Path(out)
        try:
            (self.out / "cases").mkdir(parents=True, exist_ok=True)
            path = rows_path(self.out)
            if not resume and path.exists():
                path.unlink()
            self._repair_torn_tail(path)
            self._file = open(path, "a", encoding="utf-8")
        except OSError as e:
            raise StoreError(_why(e, self.out)) from None

    @staticmethod
    def _repair_torn_tail(path: Path) -> None:
        """End a file whose last line was cut mid-write with a newline, so the next row starts clean."""
        if path.exists() and path.stat().st_size:
            with open(path, "rb+") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")

    def append(self, row: dict) -> None:
        try:
            self._file.write(json.dumps(row, default=str) + "\n")
            self._file.flush()
        except OSError as e:
            raise StoreError(_why(e, rows_path(self.out))) from None

    def write_case(self, stem: str, payload: dict, tensors_b64: str | None) -> str:
        """Write cases/<stem>.json (+ .pt); returns the JSON path. The replay command is filled in here."""
        path = self.out / "cases" / f"{stem}.json"
        payload = dict(payload, replay=f"attnref replay {path} --backend {payload['backend']}")
        try:
            if tensors_b64:
                path.with_suffix(".pt").write_bytes(base64.b64decode(tensors_b64))
            path.write_text(json.dumps(payload, indent=2, default=str))
        except OSError as e:
            raise StoreError(_why(e, path)) from None
        return str(path)

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass


def tensors_b64(tensors: dict) -> str:
    """A dict of tensors as base64 of torch.save (they travel to the driver inside a message)."""
    import torch

    buf = io.BytesIO()
    torch.save(tensors, buf)
    return base64.b64encode(buf.getvalue()).decode()


def resume_state(rows: list[dict]) -> tuple[dict[tuple[str, int], tuple[int, int, str, bool, int]], int]:
    """(backend, shard) -> (examples done, shard size, the compile key a focused shard draws or "", whether it is a
    tour, the shard whose pinned shape it draws or 0) from an earlier run's rows, and the next run number."""
    done: dict[tuple[str, int], tuple[int, int, str, bool, int]] = {}
    run = 0
    for r in rows:
        run = max(run, int(r.get("run") or 0))
        if r.get("phase") != "generate" or r.get("shard") is None:
            continue
        key = (r["backend"], int(r["shard"]))
        n, size, focus, tour, pins_of = done.get(key, (0, int(r.get("shard_size") or 0), "", False, 0))
        done[key] = (max(n, int(r.get("index") or 0)), max(size, int(r.get("shard_size") or 0)),
                     focus or r.get("focus_key") or "", tour or bool(r.get("tour")),
                     pins_of or int(r.get("pins_of") or 0))
    return done, run + 1


def saved_cases(out: Path, backends: list[str]) -> dict[str, tuple[str, ...]]:
    """Case JSON texts of the minimal cases saved in out/cases/ by earlier campaigns, per backend."""
    found: dict[str, list[str]] = {}
    for path in sorted((Path(out) / "cases").glob("*.json")):
        try:
            payload = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        backend = payload.get("backend")
        if backend in backends and isinstance(payload.get("case"), dict):
            found.setdefault(backend, []).append(json.dumps(payload["case"]))
    return {b: tuple(c) for b, c in found.items()}


def case_payload(backend: str, row: dict, evaluation: Evaluation | None) -> tuple[str, dict, str | None]:
    """(file stem, JSON payload, base64 tensors) of a case file: the case, its verdict and row, and the
    expected / actual tensors the report draws."""
    digest = hashlib.sha1(row["case"].encode()).hexdigest()[:10]
    payload = {"backend": backend, "verdict": row["verdict"], "case": json.loads(row["case"]),
               "row": {k: v for k, v in row.items() if k != "case"}}
    tensors = None
    if evaluation is not None and evaluation.expected is not None:
        a = evaluation.actual
        try:
            tensors = tensors_b64({
                "expected_output": evaluation.expected.output.cpu(), "expected_lse": evaluation.expected.lse.cpu(),
                "actual_output": a.output.detach().cpu() if a is not None else None,
                "actual_lse": a.lse.detach().cpu() if a is not None and a.lse is not None else None,
                "query_start_loc": evaluation.inputs.query_start_loc.cpu()})
        except RuntimeError as e:  # a sticky device error (found on an H100 with FA4): the case is saved without tensors
            payload["tensors_lost"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return f"{backend}-{digest}", payload, tensors
