"""`attnref replay CASE --sanitize [TOOL]`: the case's kernel call under NVIDIA compute-sanitizer.

An out-of-bounds read that happens not to change the output is still a finding: memcheck reports
it even when the verdict is `pass`. The sanitizer's report is written beside the case
(<case>.sanitize-<tool>.txt) and summarised in the case file's `sanitizer` entry.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from .caseio import UsageError

CANDIDATES = ("/usr/local/cuda/bin/compute-sanitizer", "/opt/nvidia/compute-sanitizer/compute-sanitizer")


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    return found or next((p for p in CANDIDATES if os.access(p, os.X_OK)), None)


def error_kinds(report: str) -> dict[str, int]:
    """How often each kind of kernel error was reported ('Invalid __shared__ write of size 16 bytes': 66)."""
    kinds = re.findall(r"^=========\s+((?:Invalid|Race|Uninitialized|Barrier|Misaligned)[^\n]*?)\s*$", report, re.M)
    return dict(Counter(kinds).most_common())


def error_count(report: str) -> int:
    """Errors compute-sanitizer reported ('ERROR SUMMARY: N errors'; 0 when it found none)."""
    m = re.search(r"ERROR SUMMARY:\s*(\d+)", report)
    return int(m.group(1)) if m else 0


def replay_sanitized(case_path: str, backend: str, tool: str, specs: tuple[str, ...] = (), timeout: float = 900) -> int:
    """Replay under compute-sanitizer; exit 1 when it reports errors (or the verdict fails), else 0."""
    sanitizer = find_sanitizer()
    if sanitizer is None:
        raise UsageError("--sanitize: compute-sanitizer not found (it ships with the CUDA toolkit; put it on PATH)")
    report_path = Path(case_path).with_suffix(f".sanitize-{tool}.txt")
    spec_args = [a for s in specs for a in ("--backend-spec", s)]
    # API errors off: torch's and the JIT libraries' driver probes (cuGetProcAddress) are not kernel findings
    cmd = [sanitizer, "--tool", tool, "--report-api-errors", "no", "--error-exitcode", "99",
           "--log-file", str(report_path),
           sys.executable, "-m", "cli", *spec_args, "replay", case_path, "--backend", backend]
    timed_out = False
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        status = done.returncode
    except subprocess.TimeoutExpired:
        status, timed_out = -1, True
    report = report_path.read_text(errors="replace") if report_path.exists() else ""
    errors = error_count(report)
    summary = {"tool": tool, "errors": errors, "kinds": error_kinds(report), "report": str(report_path),
               "exit": status}
    if timed_out:
        summary["timed_out_after_s"] = timeout
    try:
        payload = json.loads(Path(case_path).read_text())
        if isinstance(payload, dict) and "case" in payload:
            payload.setdefault("sanitizer", {})[tool] = summary
            Path(case_path).write_text(json.dumps(payload, indent=2))
    except (OSError, ValueError):
        pass  # a read-only or bare case file: the report file still says it
    print(json.dumps(summary))
    first = next((line for line in report.splitlines() if "=========" in line and "ERROR SUMMARY" not in line
                  and line.strip("= ")), "")
    if first:
        print(first)
    return 1 if errors or status != 0 else 0  # 99: the sanitizer's errors; 1: a failing verdict
