"""The end-of-run summary: counts per backend, new failure buckets with their replay commands, known
(ledger) failures apart, and what the exit status means."""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path

from campaign.buckets import assign, count_text, is_new_failure

EXIT_MEANING = {0: "clean: no failure the ledger does not explain", 1: "new failures (buckets above)",
                2: "usage error", 3: "harness error: attnref failed itself (the `harness error:` lines below)",
                130: "interrupted (SIGINT)", 143: "terminated (SIGTERM)"}


def summary_lines(rows: list[dict], out: Path, status: int, run: int | None = None) -> list[str]:
    """What `attnref fuzz` prints when it ends (rows of this run only, when `run` is given)."""
    if run is not None:
        rows = [r for r in rows if r.get("run", run) == run]
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        if r.get("phase") == "generate":
            counts[r["backend"]][r["verdict"]] += 1
    lines = []
    for name in sorted(counts):
        c = counts[name]
        lines.append(f"{name}: {sum(c.values())} examples: " + ", ".join(f"{k}={v}" for k, v in sorted(c.items())))
    replays = [r for r in rows if r.get("phase") == "replay"]
    if replays:
        fixed = sum(1 for r in replays if r.get("fixed"))
        lines.append(f"saved cases replayed first: {len(replays)} ({fixed} now pass, {len(replays) - fixed} still fail)")
    buckets, _ = assign(rows)
    new = sorted((b for b in buckets.values() if b.count or b.minimal), key=lambda b: (b.signature.backend, -b.count))
    if new:
        lines.append(f"new failure buckets: {len(new)}")
        for b in new:
            s = b.signature
            when = time.strftime("%H:%M:%S", time.localtime(b.first_seen)) if b.first_seen else "?"
            lines.append(f"  {b.id} {s.backend} {s.verdict}/{s.symptom} [{','.join(sorted(s.features)) or 'plain'}] "
                         f"x{count_text(b.count, b.showing)}, first seen {when}")
            case_file = (b.minimal or {}).get("case_file")
            if case_file:
                lines.append(f"      minimal: {case_file}")
                lines.append(f"      replay:  attnref replay {case_file} --backend {s.backend}")
            else:
                lines.append("      minimal: none (the campaign ended before its shrink, or it was merged)")
    known = Counter((r["backend"], r["verdict"], r["known_issue"]) for r in rows
                    if r.get("phase") == "generate" and r.get("known_issue") and r.get("verdict") in
                    ("mismatch", "nan", "contract", "crash", "timeout"))
    if known:
        lines.append("known failures (ledger, not counted as new):")
        for (backend, verdict, link), n in sorted(known.items()):
            launched = sum(1 for r in rows if r.get("known_issue") == link and r["backend"] == backend
                           and "not launched" in str(r.get("message", "")))
            extra = f", {launched} not launched" if launched else ""
            lines.append(f"  {backend} {verdict} x{n}{extra}: {link}")
    lines.append(f"rows: {Path(out) / 'rows.jsonl'}")
    lines.append(f"exit {status}: {EXIT_MEANING.get(status, 'see the README')}")
    return lines


def new_failures(rows: list[dict]) -> int:
    return sum(1 for r in rows if r.get("phase") in ("generate", "replay") and is_new_failure(r))
