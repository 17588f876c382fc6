"""Where a campaign's workers spend their time, call by call, from `attnref fuzz --profile DIR`.

Usage: python benchmarks/worker_profile.py DIR [--top 25] [--driver]

Merges the workers' cProfile statistics (DIR/worker-PID.prof) and prints, in Markdown, their own time by family (the
oracle, the judge, hypothesis, torch's operators, ...) and the calls with the most own time; `--driver` does the same
for the driver's (DIR/driver.prof). A blocking GPU read shows as the operator that waited (`.cpu()`, `.item()`,
`torch.cuda.synchronize`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from campaign.profiling import DRIVER_FILE, WORKER_GLOB, profile_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--driver", action="store_true", help="the driver's profile instead of the workers'")
    a = ap.parse_args(argv)
    print(profile_table(a.folder, a.top, DRIVER_FILE if a.driver else WORKER_GLOB), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
