"""The `attnref` command: backends, fuzz, replay, report."""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path


def _cmd_backends(a) -> int:
    from backends.registry import listings

    rows = listings(include_mutants=a.mutants, specs=tuple(a.backend_spec))
    width = max(len(x.backend.name) for x in rows)
    for x in rows:
        b = x.backend
        status = "available" if x.available else f"unavailable: {x.unavailable}"
        print(f"{b.name:<{width}}  {status}")
        if a.verbose and getattr(b, "caps", None) is not None:
            c = b.caps
            print(f"{'':<{width}}  devices={sorted(c.devices)} dtypes={sorted(d.value for d in c.dtypes)} "
                  f"attn_types={sorted(t.value for t in c.attn_types)}")
            print(f"{'':<{width}}  features={sorted(f.value for f in c.features)} "
                  f"layouts={sorted(l.value for l in c.kv_layouts) or ['contiguous']} "
                  f"kv_dtypes={sorted(k.value for k in c.kv_cache_dtypes)} lse_base="
                  f"{c.lse_base.value if c.lse_base else 'none'} paged={c.reads_paged_cache}")
            if b.description:
                print(f"{'':<{width}}  {b.description}")
    return 0


def _cmd_fuzz(a) -> int:
    from backends.registry import listings
    from .campaign import CampaignConfig, run_campaign

    available = [x.backend.name for x in listings(include_mutants=a.mutants, specs=tuple(a.backend_spec)) if x.available]
    names = a.backend or [n for n in available if not n.startswith("mutant-") or a.mutants]
    unknown = [n for n in names if n not in available]
    if unknown:
        print(f"not available here: {', '.join(unknown)} (see `attnref backends`)", file=sys.stderr)
        return 2
    examples = None if a.time and a.examples is None else (a.examples or 200)
    cfg = CampaignConfig(out=Path(a.out), backends=names, examples=examples, seconds=a.time, seed=a.seed,
                         example_timeout=a.example_timeout, specs=tuple(a.backend_spec), resume=a.resume,
                         limits=json.loads(a.limits))
    bar = _progress(cfg)
    rows = run_campaign(cfg, progress=bar)
    if hasattr(bar, "close"):
        bar.close()
    _print_summary(rows)
    print(f"rows: {cfg.out / 'rows.jsonl'}")
    return 0


def _progress(cfg):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    from .campaign import read_rows

    bar = tqdm(total=None, unit="case", desc="fuzz", disable=not sys.stderr.isatty())
    seen = {"n": 0}

    def update(name: str) -> None:
        n = len(read_rows(cfg.out))
        bar.set_description(f"fuzz {name}")
        bar.update(n - seen["n"])
        seen["n"] = n

    update.close = bar.close
    return update


def _print_summary(rows: list[dict]) -> None:
    from collections import Counter, defaultdict

    by = defaultdict(Counter)
    for r in rows:
        if r.get("phase") == "generate":
            by[r["backend"]][r["verdict"]] += 1
    for name, counts in by.items():
        print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))


def _cmd_replay(a) -> int:
    from backends.registry import get
    from reference.case import Case
    from .compare import evaluate

    payload = json.loads(Path(a.case).read_text())
    case = Case.from_dict(payload["case"] if "case" in payload else payload)
    name = a.backend or payload.get("backend")
    if not name:
        print("which backend? pass --backend NAME", file=sys.stderr)
        return 2
    backend = get(name, include_mutants=True, specs=tuple(a.backend_spec))
    unavailable = backend.availability() if a.device is None else None
    if unavailable:
        print(f"backend {name} is unavailable here: {unavailable} (replay it where it runs, or pass "
              f"--backend with another one)", file=sys.stderr)
        return 2
    row = evaluate(backend, case, device=a.device).row
    keep = ("verdict", "message", "max_err", "limit", "mean_err", "mean_limit", "lse_max_err", "lse_limit",
            "worst_seq", "worst_token", "worst_head", "worst_dim", "contract")
    print(json.dumps({k: row[k] for k in keep if k in row}, indent=2, default=str))
    expected = payload.get("verdict")
    if expected and expected != row["verdict"]:
        print(f"note: the saved verdict was {expected}", file=sys.stderr)
    return 0 if row["verdict"] in ("pass", "blind") else 1


def _cmd_probe(a) -> int:
    from backends.registry import get, listings

    from .probes import run_probes

    names = a.backend or [x.backend.name for x in listings(specs=tuple(a.backend_spec)) if x.available]
    failed = 0
    sink = None
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        sink = (Path(a.out) / "probes.jsonl").open("a")
    print(f"{'backend':34s} {'probe':22s} verdict")
    for name in names:
        for row in run_probes(get(name, include_mutants=True, specs=tuple(a.backend_spec))):
            failed += row["verdict"] not in ("pass", "not_applicable")
            detail = f"  ({row['detail'][:90]})" if row["verdict"] not in ("pass", "not_applicable") else ""
            print(f"{name:34s} {row['probe']:22s} {row['verdict']}{detail}")
            if sink is not None:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
    return 1 if failed else 0


def _cmd_report(a) -> int:
    from reports.build import build_report

    paths = build_report(Path(a.results), Path(a.out) if a.out else None)
    print(f"report: {paths['index']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    warnings.simplefilter("ignore")
    p = argparse.ArgumentParser(prog="attnref", description="float64 attention oracle and differential fuzzer")
    p.add_argument("--backend-spec", action="append", default=[], metavar="MODULE:ATTR",
                   help="also load backends from package.module:attr")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("backends", help="list every backend: available or why not, and what it supports")
    b.add_argument("-v", "--verbose", action="store_true")
    b.add_argument("--mutants", action="store_true", help="include the planted-bug mutants")
    b.set_defaults(func=_cmd_backends)

    f = sub.add_parser("fuzz", help="run a fuzzing campaign")
    f.add_argument("--backend", action="append", help="backend name (repeatable); default: every available one")
    f.add_argument("--examples", type=int, help="examples per backend (default 200)")
    f.add_argument("--time", type=float, help="seconds for the whole campaign, split over backends")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--out", default="attnref-results")
    f.add_argument("--resume", action="store_true", help="keep rows.jsonl and continue")
    f.add_argument("--example-timeout", type=float, default=120.0, help="seconds before a hung kernel is killed")
    f.add_argument("--mutants", action="store_true", help="allow mutant-* backends")
    f.add_argument("--limits", default="{}", help="JSON of fuzz.strategies.Limits: sizes, and a focus "
                   'for JIT-compiled kernels, e.g. \'{"dtypes": ["bfloat16"], "head_sizes": [128]}\'')
    f.set_defaults(func=_cmd_fuzz)

    pr = sub.add_parser("probe", help="convention probes (alignment, windows, empty rows, LSE base, ...)")
    pr.add_argument("--backend", action="append", help="backend name (repeatable); default: every available one")
    pr.add_argument("--out", help="also append the rows to OUT/probes.jsonl (the report shows them)")
    pr.set_defaults(func=_cmd_probe)

    r = sub.add_parser("replay", help="re-run a saved case (bit-identical inputs) and print its verdict")
    r.add_argument("case")
    r.add_argument("--backend")
    r.add_argument("--device")
    r.set_defaults(func=_cmd_replay)

    rep = sub.add_parser("report", help="tables, JUnit XML, Markdown and the HTML report from a results dir")
    rep.add_argument("results")
    rep.add_argument("--out", help="where to write (default: RESULTS/report)")
    rep.set_defaults(func=_cmd_report)

    a = p.parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
