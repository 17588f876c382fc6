"""Replay one saved case with fields changed, to tell which ingredient a failure needs (run ON THE DEVICE).

  python3 tools/analysis/replay-variants.py CASE.json '{"cache.quant.kv_cache_dtype": "auto"}' '{"sliding_window": null}' ...

Each override is a JSON object of dotted Case fields; each variant prints its verdict and message.
"""
from __future__ import annotations

import json
import sys

sys.path.insert(0, ".")

from backends.registry import get  # noqa: E402
from cli.caseio import load_case_file, parse_case  # noqa: E402
from fuzz.compare import evaluate  # noqa: E402


def _set(tree: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for key in path:
        tree = tree[key]
    tree[last] = value


def main() -> None:
    _, meta = load_case_file(sys.argv[1])
    backend = get(meta.get("backend"))
    for override in ["{}", *sys.argv[2:]]:
        tree = json.loads(json.dumps(meta["case"]))
        for field, value in json.loads(override).items():
            _set(tree, field, value)
        try:
            variant = parse_case(tree, "variant")
        except Exception as e:  # an override that makes the case invalid is reported, not fatal
            print(f"{override}: invalid: {e}")
            continue
        row = evaluate(backend, variant).row
        print(f"{override}: {row['verdict']}: {(row.get('message') or '')[:200]}", flush=True)


if __name__ == "__main__":
    main()
