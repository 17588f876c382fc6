"""The README's "Use it in CI" job: its attnref commands parse with the real CLI, and the same commands
run end to end on a CPU backend (fuzz, report, the summary a job page shows, the exit status)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from cli.main import parser

README = Path(__file__).parents[2] / "README.md"


def ci_commands() -> list[str]:
    """The attnref invocations of the README's CI job (its first yaml block after "### Use it in CI")."""
    text = README.read_text()
    section = text[text.index("### Use it in CI"):]
    block = section[section.index("```yaml") + 7: section.index("```", section.index("```yaml") + 7)]
    commands = []
    for line in block.splitlines():
        m = re.search(r"run: (.*)$", line)
        if m:
            commands += [part.strip() for part in m.group(1).split("&&") if part.strip().startswith("attnref")]
    return commands


def test_the_ci_job_s_commands_are_valid_attnref_command_lines():
    commands = ci_commands()
    assert any(" fuzz " in c for c in commands) and any(c.startswith("attnref report") for c in commands)
    for command in commands:
        args = parser().parse_args(shlex.split(command)[1:])
        assert args.command in ("fuzz", "report")


def test_the_ci_job_runs_end_to_end_and_gates_on_new_failures(tmp_path):
    fuzz = next(c for c in ci_commands() if " fuzz " in c)
    args = shlex.split(fuzz)[1:]
    args = args[args.index("fuzz"):]  # a CPU backend instead of the user's kernel, a short budget
    args[args.index("--backend") + 1] = "torch-sdpa-math"
    args[args.index("--time") + 1] = "6"
    args[args.index("--out") + 1] = str(tmp_path / "fuzz-results")
    clean = subprocess.run([sys.executable, "-m", "cli", *args, "--workers", "1", "--quiet"], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    report = subprocess.run([sys.executable, "-m", "cli", "report", str(tmp_path / "fuzz-results")], capture_output=True, text=True)
    assert report.returncode == 0 and (tmp_path / "fuzz-results" / "summary.md").exists()
    assert (tmp_path / "fuzz-results" / "junit.xml").exists()
    args[args.index("--backend") + 1] = "mutant-lse-base2"
    args[args.index("--out") + 1] = str(tmp_path / "with-bug")
    found = subprocess.run([sys.executable, "-m", "cli", *args, "--mutants", "--workers", "1", "--quiet"],
                           capture_output=True, text=True)
    assert found.returncode == 1 and "replay:  attnref replay" in found.stdout
