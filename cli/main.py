"""The `attnref` command: backends, fuzz, replay, probe, report, repro, schema.

Exit statuses: 0 clean, 1 new failures (a finding the ledger does not explain), 2 usage error
(one line naming the field and what is allowed, never a traceback), 3 harness error, 130 / 143
interrupted by SIGINT / SIGTERM (the rows computed so far are written; `--resume` continues).
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from backends.registry import BackendSpecError

from .caseio import UsageError, load_case_file


def _cmd_cache(a) -> int:
    from campaign.caches import cache_root, clear, describe

    root = cache_root(a.cache_dir)
    if a.clear:
        print(f"cleared {clear(root) / 2**20:.1f} MiB of compile caches under {root}")
        return 0
    print("\n".join(describe(root)))
    return 0


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
                  f"head_sizes={list(c.head_sizes)} attn_types={sorted(t.value for t in c.attn_types)}")
            print(f"{'':<{width}}  features={sorted(f.value for f in c.features)} "
                  f"layouts={sorted(l.value for l in c.kv_layouts) or ['contiguous']} "
                  f"kv_dtypes={sorted(k.value for k in c.kv_cache_dtypes)} lse_base="
                  f"{c.lse_base.value if c.lse_base else 'none'} paged={c.reads_paged_cache}")
            if c.encodings:
                print(f"{'':<{width}}  encodings: " + "; ".join(f"{n}={'|'.join(v)}" for n, v in c.encodings))
            if b.description:
                print(f"{'':<{width}}  {b.description}")
    return 0


def _workers(text: str) -> int | str:
    if text == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer >= 1 or 'auto'")
    return n


def _cmd_fuzz(a) -> int:
    from backends.registry import listings
    from campaign.engine import CampaignConfig, run_campaign
    from campaign.store import StoreError
    from fuzz.strategies import LimitsError, limits_from_json

    from .summary import summary_lines

    try:
        limits_from_json(a.limits)  # checked here: one line naming the key; workers rebuild it from the JSON
    except LimitsError as e:
        raise UsageError(str(e)) from None
    # asked of the named backends alone: every backend's check costs the CLI 1.5 s (backends.registry.get)
    available = [x.backend.name for x in listings(include_mutants=a.mutants, specs=tuple(a.backend_spec),
                                                  names=a.backend or None) if x.available]
    names = a.backend or [n for n in available if not n.startswith("mutant-") or a.mutants]
    unknown = [n for n in names if n not in available]
    if unknown:
        raise UsageError(f"--backend: not available here: {', '.join(unknown)} (see `attnref backends`)")
    if a.examples is not None and a.examples < 1:
        raise UsageError(f"--examples={a.examples}: an integer >= 1")
    if a.time is not None and a.time <= 0:
        raise UsageError(f"--time={a.time}: seconds > 0")
    if not 0.0 < a.compile_share <= 1.0:
        raise UsageError(f"--compile-share={a.compile_share}: a share in (0, 1] (1: compile every case where drawn)")
    if a.profile is not None:
        try:
            Path(a.profile).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--profile {a.profile}: cannot create that folder ({e.strerror})") from None
    examples = None if a.time and a.examples is None else (a.examples or 200)
    cfg = CampaignConfig(out=Path(a.out), backends=names, examples=examples, seconds=a.time, seed=a.seed,
                         example_timeout=a.example_timeout, compile_timeout=a.compile_timeout,
                         specs=tuple(a.backend_spec), resume=a.resume,
                         limits=json.loads(a.limits), workers=a.workers,
                         shard_size=a.shard_size, shrink_per_bucket=a.shrink_per_bucket,
                         oracle_cpu_max=a.oracle_cpu_max, replay_saved=not a.no_replay,
                         use_ray=a.ray is not None, ray_address=a.ray or None, progress=not a.quiet,
                         compile_slices=a.compile_slices, mps=a.mps, cache_dir=a.cache_dir,
                         compile_share=a.compile_share, profile_dir=a.profile)
    if cfg.use_ray:
        import importlib.util

        from campaign.ray_pool import INSTALL_HINT

        if importlib.util.find_spec("ray") is None:
            raise UsageError(f"--ray: {INSTALL_HINT}")
    try:
        result = run_campaign(cfg)
    except StoreError as e:
        raise UsageError(f"--out {a.out}: {e}") from None
    for line in summary_lines(result.rows, cfg.out, result.status, run=_last_run(result.rows)):
        print(line)
    for error in result.harness_errors:
        print(f"harness error: {error}", file=sys.stderr)
    if result.interrupted is not None:
        print(f"interrupted: the rows computed so far are in {cfg.out / 'rows.jsonl'}; continue with the same "
              f"command and --resume", file=sys.stderr)
    return result.status


def _last_run(rows: list[dict]) -> int | None:
    runs = [r.get("run") for r in rows if r.get("run") is not None]
    return max(runs) if runs else None


def _case_and_backend(a):
    """(Case, payload, backend name) of a case-file command; the backend from --backend or the file."""
    case, payload = load_case_file(a.case)
    name = a.backend or payload.get("backend")
    if not name:
        raise UsageError(f"{a.case}: the file names no backend; pass --backend NAME")
    return case, payload, name


def _cmd_replay(a) -> int:
    from backends.registry import get
    from fuzz.compare import evaluate

    case, payload, name = _case_and_backend(a)
    try:
        backend = get(name, include_mutants=True, specs=tuple(a.backend_spec))
    except KeyError as e:
        raise UsageError(f"--backend: {e.args[0]}") from None
    unavailable = backend.availability() if a.device is None else None
    if unavailable:
        print(f"backend {name} is unavailable here: {unavailable} (replay it where it runs, or pass "
              f"--backend with another one)", file=sys.stderr)
        return 2
    if a.sanitize:
        from .sanitize import replay_sanitized

        return replay_sanitized(a.case, name, a.sanitize, tuple(a.backend_spec), timeout=a.sanitize_timeout)
    row = evaluate(backend, case, device=a.device).row
    keep = ("verdict", "message", "symptoms", "max_err", "limit", "mean_err", "mean_limit", "lse_max_err", "lse_limit",
            "worst_seq", "worst_token", "worst_head", "worst_dim", "contract")
    print(json.dumps({k: row[k] for k in keep if k in row}, indent=2, default=str))
    expected = payload.get("verdict")
    if expected and expected != row["verdict"]:
        print(f"note: the saved verdict was {expected}", file=sys.stderr)
    return 0 if row["verdict"] in ("pass", "blind") else 1


def _cmd_probe(a) -> int:
    from backends.registry import get, listings
    from fuzz.probes import run_probes

    names = a.backend or [x.backend.name for x in listings(specs=tuple(a.backend_spec)) if x.available]
    failed = 0
    sink = None
    if a.out:
        try:
            Path(a.out).mkdir(parents=True, exist_ok=True)
            sink = (Path(a.out) / "probes.jsonl").open("a")
        except OSError as e:
            raise UsageError(f"--out {a.out}: cannot write ({e.strerror or e})") from None
    print(f"{'backend':34s} {'probe':28s} verdict")
    for name in names:
        try:
            backend = get(name, include_mutants=True, specs=tuple(a.backend_spec))
        except KeyError as e:
            raise UsageError(f"--backend: {e.args[0]}") from None
        for row in run_probes(backend):
            failed += row["verdict"] not in ("pass", "not_applicable")
            detail = f"  ({row['detail'][:90]})" if row["verdict"] not in ("pass", "not_applicable") else ""
            print(f"{name:34s} {row['probe']:28s} {row['verdict']}{detail}")
            if sink is not None:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
    return 1 if failed else 0


def _cmd_report(a) -> int:
    from reports.build import build_report

    if not Path(a.results).is_dir():
        raise UsageError(f"{a.results}: no such results directory (the --out of `attnref fuzz`)")
    try:
        paths = build_report(Path(a.results), Path(a.out) if a.out else None)
    except OSError as e:
        raise UsageError(f"report: cannot write ({e.strerror or e}: {getattr(e, 'filename', '')})") from None
    print(f"report: {paths['index']}")
    return 0


def _cmd_repro(a) -> int:
    from reports.repro import ReproUnsupported, write_repro

    case, _, name = _case_and_backend(a)
    try:
        text = write_repro(case, name, specs=tuple(a.backend_spec))
    except ReproUnsupported as e:
        raise UsageError(f"repro: {e}") from None
    if a.output:
        Path(a.output).write_text(text)
        print(f"repro: {a.output} (run it with python; it needs only torch and the library under test)")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_findings(a) -> int:
    from findings.render import render

    sys.stdout.write(render())
    return 0


def _cmd_schema(a) -> int:
    from .caseio import case_schema

    print(json.dumps(case_schema(), indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
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
    f.add_argument("--examples", type=int, help="generated examples per backend (default 200; none with --time)")
    f.add_argument("--time", type=float, help="seconds for the whole campaign, backends side by side")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--out", default="attnref-results")
    f.add_argument("--resume", action="store_true", help="keep rows.jsonl and continue each shard where it stopped")
    f.add_argument("--workers", type=_workers, default="auto",
                   help="worker processes per GPU (in all, without a GPU), or 'auto' (default): from cores, GPUs, memory")
    f.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the workers as Ray actors on the cluster at ADDRESS (none: a local Ray)")
    f.add_argument("--shard-size", type=int, help="examples per seeded shard (default: from budget and workers)")
    f.add_argument("--shrink-per-bucket", type=int, default=1, help="failures of one bucket that are shrunk (default 1)")
    f.add_argument("--oracle-cpu-max", type=int, help="score elements up to which the oracle runs on the CPU")
    f.add_argument("--no-replay", action="store_true", help="do not replay the minimal cases saved in OUT/cases first")
    f.add_argument("--quiet", action="store_true", help="no live progress line")
    f.add_argument("--compile-slices", action="store_true",
                   help="JIT backends (FA4, FlashInfer, Triton): each shard draws one dtype / head size / set of "
                        "compile-keyed features, a worker stays on it: 4-4.6x the examples/s of FA4 on an H100, "
                        "but fewer combinations in a short run (for long false-alarm runs)")
    f.add_argument("--example-timeout", type=float, default=120.0, help="seconds before a hung kernel is killed")
    f.add_argument("--compile-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="the same for a worker's first example of a JIT backend's compile key (dtype, head size, "
                        "kv dtype, keyed features), which may compile for minutes first")
    f.add_argument("--mps", action="store_true",
                   help="run the GPU workers under a CUDA MPS daemon (started and stopped with the campaign unless one "
                        "runs already): 1.03-1.26x the small-tier examples/s of 16 workers on an H100; while it runs, "
                        "other users' CUDA programs cannot use the GPU")
    f.add_argument("--compile-share", type=float, default=0.2, metavar="SHARE",
                   help="JIT backends: the share of the workers that may build modules at once (one build per compile "
                        "key on the machine); a case whose module is being built, or drawn while every build slot is "
                        "busy, waits until its module exists, and the worker evaluates built ones; in the first "
                        "two minutes at least 0.3, as nothing is built yet, then at most SHARE, one slot fewer (down "
                        "to one) while evaluation is under 70 %% of the last minute's worker time (default 0.2; 1: "
                        "compile every case where it is drawn)")
    f.add_argument("--cache-dir", metavar="DIR",
                   help="the JIT libraries' compile caches (Triton, inductor, FA4, FlashInfer), kept between campaigns "
                        "(default: $ATTNREF_CACHE_DIR, $XDG_CACHE_HOME/attnref or ~/.cache/attnref; see `attnref cache`)")
    f.add_argument("--profile", metavar="DIR",
                   help="run every worker's tasks and the driver under cProfile, statistics in DIR (worker-PID.prof, "
                        "driver.prof; `python benchmarks/worker_profile.py DIR` tabulates them); slows the campaign")
    f.add_argument("--mutants", action="store_true", help="allow mutant-* backends")
    f.add_argument("--limits", default="{}", help="JSON of fuzz.limits.Limits: sizes, and a focus "
                   'for JIT-compiled kernels, e.g. \'{"dtypes": ["bfloat16"], "head_sizes": [128]}\'')
    f.set_defaults(func=_cmd_fuzz)

    c = sub.add_parser("cache", help="the JIT libraries' compile caches campaigns keep: sizes, or --clear")
    c.add_argument("--cache-dir", metavar="DIR", help="the folder (default as for `attnref fuzz`)")
    c.add_argument("--clear", action="store_true", help="remove every library's cache under it")
    c.set_defaults(func=_cmd_cache)

    pr = sub.add_parser("probe", help="convention probes (alignment, windows, empty rows, LSE base, ...)")
    pr.add_argument("--backend", action="append", help="backend name (repeatable); default: every available one")
    pr.add_argument("--out", help="also append the rows to OUT/probes.jsonl (the report shows them)")
    pr.set_defaults(func=_cmd_probe)

    r = sub.add_parser("replay", help="re-run a saved case (bit-identical inputs) and print its verdict")
    r.add_argument("case")
    r.add_argument("--backend")
    r.add_argument("--device")
    r.add_argument("--sanitize", nargs="?", const="memcheck", choices=["memcheck", "racecheck", "initcheck", "synccheck"],
                   help="run the case under NVIDIA compute-sanitizer (default tool: memcheck)")
    r.add_argument("--sanitize-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="stop the sanitized run after this long (a JIT compile under the sanitizer is slow); the "
                        "case file records the timeout")
    r.set_defaults(func=_cmd_replay)

    rep = sub.add_parser("report", help="tables, JUnit XML, Markdown and the HTML report from a results dir")
    rep.add_argument("results")
    rep.add_argument("--out", help="where to write (default: RESULTS/report)")
    rep.set_defaults(func=_cmd_report)

    rp = sub.add_parser("repro", help="a self-contained script (torch + the library only) that reproduces a case")
    rp.add_argument("case")
    rp.add_argument("--backend")
    rp.add_argument("-o", "--output", help="write the script here (default: stdout)")
    rp.set_defaults(func=_cmd_repro)

    fi = sub.add_parser("findings", help="the findings catalog as Markdown (what FINDINGS.md holds)")
    fi.set_defaults(func=_cmd_findings)

    sc = sub.add_parser("schema", help="print the JSON Schema of a Case")
    sc.set_defaults(func=_cmd_schema)
    return p


def main(argv: list[str] | None = None) -> int:
    warnings.simplefilter("ignore")
    a = parser().parse_args(argv)
    try:
        return a.func(a)
    except (UsageError, BackendSpecError) as e:
        print(f"attnref {a.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
