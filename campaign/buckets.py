"""Failure buckets: one bug, one bucket, shrunk once.

A failing row's signature is (backend, verdict, symptom, features of its case). Its coarse key
(backend, verdict, symptom) is what shrinking keeps: a shrink only accepts smaller cases that
still show that symptom. The minimal case's signature names the bucket. A bucket *applies* to a
later failure of the same backend that has at least the minimal case's features (a window bug's
minimal case has `window`; every later failure of that bug has it too), and *shows* the symptoms
its minimal case shows (one bug often breaks output and LSE together). A failure is explained
only when every one of its symptoms is shown by a bucket that applies to it (`explained`: a symptom
of another verdict than the bucket's own, seen without it, is a second bug's): then it is counted,
not shrunk, in the most general such bucket that shows its main symptom. A failure with a symptom
no applicable bucket shows is a second bug beside the first: it is shrunk toward that symptom
(`target`), so that no bucket hides it. A shrink that ends inside an existing bucket merges into
it. Features are compared by family (fp8 e4m3 / e5m2 are one dequantization path), without the
incidental `context`.

`Buckets` is the live state a campaign consults for each row (no I/O, tested by calling it);
`assign` recomputes the same buckets from a finished campaign's rows for the reports.
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from enum import Enum

FAILURES = ("mismatch", "nan", "contract", "crash", "timeout")


def crash_class(message: str) -> str:
    """The exception type and first words of a crash message, numbers and addresses masked."""
    first = (message or "").strip().splitlines()[0] if message else ""
    first = re.sub(r"0x[0-9a-fA-F]+", "0x#", first)
    first = re.sub(r"\d+(\.\d+)?", "#", first)
    return first[:90]


def symptom(row: dict) -> str:
    """The row's main symptom: what is wrong, not by how much."""
    verdict = row.get("verdict")
    if verdict == "timeout":
        return "timeout"
    if verdict == "crash":
        return crash_class(row.get("message", ""))
    kind = row.get("symptom") or verdict or ""
    return "output" if kind == "output-mean" else kind  # a broad shift under the max limit: still the output


@dataclass(frozen=True)
class Signature:
    backend: str
    verdict: str
    symptom: str
    features: frozenset[str]

    @property
    def coarse(self) -> tuple[str, str, str]:
        return (self.backend, self.verdict, self.symptom)

    @property
    def bucket_id(self) -> str:
        text = "|".join([*self.coarse, ",".join(sorted(self.features))])
        return "b-" + hashlib.sha1(text.encode()).hexdigest()[:8]


# Features a minimal case may carry without the bug needing them: hypothesis' simplest sequence is a
# decode, which has cached context, so "context" says nothing about the bug.
INCIDENTAL = frozenset({"context"})
# One code path, several spellings: fp8 e4m3 / e5m2 caches share a kernel's dequantization, so do the
# two int8 modes; query heads sharing one kv head (MQA) or several (GQA) share the grouped-head path. A GQA bug's
# shrink draws kv heads down to one: on an H100, a shrink of fa4-paged's `[gqa,paged]` output mismatch ended at an
# `[mqa,paged]` case whose bucket counted no row, and the mismatch got a second bucket
# (benchmarks/results/campaigns/jit-untold-fa4-failed-builds-h100-2026-12-07.md).
FAMILY = {"kv_fp8_e4m3": "kv_fp8", "kv_fp8_e5m2": "kv_fp8", "kv_int8_kv": "kv_int8", "kv_int8_k_fp16_v": "kv_int8",
          "mqa": "gqa"}


def features_of(row: dict) -> frozenset[str]:
    names = (f for f in (row.get("features") or "").split(",") if f)
    return frozenset(FAMILY.get(f, f) for f in names) - INCIDENTAL


def row_symptoms(row: dict) -> frozenset[tuple[str, str]]:
    """Every (verdict, symptom) a row shows (a mean-only output mismatch counts as an output one); a crash
    or a hang shows its one class."""
    if row.get("verdict") in ("crash", "timeout"):
        return frozenset({(str(row["verdict"]), symptom(row))})
    listed = row.get("symptoms")
    pairs = [(s["verdict"], s["symptom"]) for s in listed] if listed else [(str(row.get("verdict")), symptom(row))]
    return frozenset((v, "output" if k == "output-mean" else k) for v, k in pairs)


def signature(row: dict) -> Signature:
    """A row's signature; a minimal row is filed under the symptom its shrink kept (`bucket_symptom`)."""
    if row.get("bucket_symptom"):
        verdict, kind = row["bucket_symptom"]
        return Signature(str(row.get("backend")), verdict, kind, features_of(row))
    return Signature(str(row.get("backend")), str(row.get("verdict")), symptom(row), features_of(row))


def shown(bucket: "Bucket") -> frozenset[tuple[str, str]]:
    """The (verdict, symptom) pairs a bucket's minimal case shows (its own signature's at least)."""
    sig = bucket.signature
    out = {(sig.verdict, sig.symptom)}
    if bucket.minimal is not None:
        out |= row_symptoms(bucket.minimal)
    return frozenset(out)


def applies(bucket: "Bucket", row: dict) -> bool:
    """Same backend and at least the minimal case's features: the bucket's bug can be in this row."""
    sig = bucket.signature
    return sig.backend == row.get("backend") and sig.features <= features_of(row)


def main_symptom(row: dict) -> tuple[str, str]:
    sig = signature(row)
    return (sig.verdict, sig.symptom)


def explained(bucket: "Bucket", row: dict) -> frozenset[tuple[str, str]]:
    """The symptoms of a failing row this bucket explains, where it applies: every one its minimal case shows when the
    row shows the bucket's own symptom (its bug is at work there), else those of the bucket's own verdict only. One
    mismatch often moves output and LSE by different margins, so an LSE-only row is the output bucket's; a contract
    violation or a NaN beside a mismatch, seen without the mismatch, is a second bug's (two planted bugs, one whose
    minimal case shows both, made one bucket or two by which shrink ended first: tests/campaign/test_two_bugs.py)."""
    sig = bucket.signature
    if not applies(bucket, row):
        return frozenset()
    if (sig.verdict, sig.symptom) in row_symptoms(row) | {main_symptom(row)}:
        return shown(bucket)
    return frozenset(s for s in shown(bucket) if s[0] == sig.verdict)


def covers(bucket: "Bucket", row: dict) -> bool:
    """Whether this one bucket explains a failing row: every symptom of the row (a row with a symptom the minimal case
    lacks has a second bug)."""
    return row_symptoms(row) <= explained(bucket, row)


def missing(buckets, row: dict) -> list[tuple[str, str]]:
    """The row's symptoms no applicable bucket shows, its main symptom first, then in sorted order."""
    seen: set = set()
    for b in buckets:
        seen |= explained(b, row)
    main = main_symptom(row)
    return sorted((s for s in row_symptoms(row) | {main} if s not in seen), key=lambda s: (s != main, s))


def explaining(buckets, row: dict) -> "Bucket | None":
    """The bucket a failing row is counted in when every symptom of it is explained: the most general
    applicable bucket that shows its main symptom (the other symptoms have buckets of their own)."""
    buckets = list(buckets)
    if missing(buckets, row):
        return None
    main = main_symptom(row)  # nothing missing: an applicable bucket shows it
    return _most_general([b for b in buckets if main in explained(b, row)])


def target(buckets, row: dict) -> Signature:
    """What a shrink of this failure keeps: its first symptom no applicable bucket shows (its main symptom
    when no bucket applies), with the row's features."""
    verdict, kind = (missing(buckets, row) or [main_symptom(row)])[0]
    return Signature(str(row.get("backend")), verdict, kind, features_of(row))


def is_new_failure(row: dict) -> bool:
    """A failure no ledger entry explains."""
    return row.get("verdict") in FAILURES and not row.get("known_issue")


def shrinkable(row: dict) -> bool:
    """A failure that another worker can draw again and shrink: not one that killed or poisoned its process."""
    return row.get("verdict") != "timeout" and not row.get("worker_died") and not row.get("sticky")


class Decision(Enum):
    IGNORE = "ignore"  # not a new failure
    COUNT = "count"  # covered by a bucket (or one being shrunk): counted, not shrunk
    SHRINK = "shrink"  # a new kind of failure: shrink it
    SAVE = "save"  # a new kind of failure that cannot be shrunk (crash of the process, timeout): save as is


@dataclass
class Bucket:
    signature: Signature
    minimal: dict | None = None  # the minimal row (None: not shrunk, e.g. a timeout saved as found)
    count: int = 0
    first_seen: float | None = None
    examples: list[str] = field(default_factory=list)  # a few rows' example ids
    merged: list[dict] = field(default_factory=list)  # minimal rows of more specific buckets this one covers
    # features of the counted rows beyond the minimal case's, with how many rows had each: where a second bug with
    # the same symptom may hide among them, the report shows it (a bucket never hides a symptom)
    others: Counter = field(default_factory=Counter)
    # failing rows it applies to that show its symptom, wherever they are counted (a row counts once, in the most
    # general bucket showing its main symptom; `assign` fills it): a second bug's bucket may count 0 rows that show it
    showing: int = 0

    @property
    def id(self) -> str:
        return self.signature.bucket_id


class Buckets:
    """Live bucket state of one campaign: decides, row by row, what is shrunk and what is counted."""

    def __init__(self, per_bucket: int = 1, keep_examples: int = 3) -> None:
        self.per_bucket = per_bucket
        self.keep_examples = keep_examples
        self.buckets: dict[str, Bucket] = {}
        self.in_flight: dict[tuple[str, str, str], int] = defaultdict(int)
        self.shrinks: dict[Signature, int] = defaultdict(int)  # shrinks started per raw signature
        self.deferred: dict[tuple[str, str, str], list[dict]] = defaultdict(list)

    def covering(self, row: dict) -> Bucket | None:
        """The bucket that counts a failing row when buckets explain every symptom of it (`explaining`)."""
        return explaining(self.buckets.values(), row)

    def target(self, row: dict) -> Signature:
        """The signature a shrink of this failure keeps: toward the symptom no bucket explains yet."""
        return target(self.buckets.values(), row)

    def observe(self, row: dict) -> Decision:
        """Decide what to do with a generated row; counts it into its bucket when one covers it."""
        if not is_new_failure(row):
            return Decision.IGNORE
        sig = self.target(row)
        bucket = self.covering(row)
        if bucket is not None:
            self._count(bucket, row)
            return Decision.COUNT
        if not shrinkable(row):  # cannot be drawn again in a live process: its bucket's case, as found
            bucket = self.buckets.setdefault(sig.bucket_id, Bucket(sig))
            self._count(bucket, row)
            return Decision.SAVE if bucket.minimal is None and bucket.count == 1 else Decision.COUNT
        if self.in_flight[sig.coarse] >= self.per_bucket or self.shrinks[sig] >= self.per_bucket:
            # decided when the shrink in flight ends; or its K shrinks ended in buckets that do not
            # cover it: grouped with its symptom's other leftovers at the end (`leftovers`)
            self.deferred[sig.coarse].append(row)
            return Decision.COUNT
        self.shrinks[sig] += 1
        self.in_flight[sig.coarse] += 1
        return Decision.SHRINK

    def known_minimal(self, row: dict) -> Bucket:
        """Register a minimal case found before (a resumed campaign, a replayed saved case)."""
        sig = signature(row)
        bucket = self.buckets.setdefault(sig.bucket_id, Bucket(sig, first_seen=row.get("t")))
        if bucket.minimal is None:
            bucket.minimal = row
        return bucket

    def observe_unshrunk(self, row: dict) -> Bucket:
        """A failure whose shrink found nothing to keep: it is its own bucket's case, as found."""
        sig = self.target(row)
        bucket = self.buckets.setdefault(sig.bucket_id, Bucket(sig))
        self._count(bucket, row)
        return bucket

    def shrunk(self, coarse: tuple[str, str, str], minimal: dict | None,
               origin: dict | None = None) -> tuple[Bucket | None, bool, list[dict]]:
        """A shrink of `coarse` (started from the failure `origin`) ended with `minimal` (None: it
        found nothing to keep).

        Returns (its bucket, whether that bucket is new, deferred rows that still need a shrink).
        The origin and the deferred rows the bucket covers are counted into it.
        """
        self.in_flight[coarse] = max(0, self.in_flight[coarse] - 1)
        bucket, new = None, False
        if minimal is not None:
            sig = signature(minimal)
            bucket = self.buckets.get(sig.bucket_id) or self.covering(minimal)  # the same bug, found before
            new = bucket is None
            if new:
                bucket = self.buckets[sig.bucket_id] = Bucket(sig, minimal=minimal, first_seen=minimal.get("t"))
            elif bucket.minimal is None:
                bucket.minimal = minimal
        waiting, still = ([origin] if origin is not None else []) + self.deferred.pop(coarse, []), []
        for row in waiting:
            covering = self.covering(row)
            if covering is not None:
                self._count(covering, row)
            else:
                still.append(row)
        return bucket, new, still

    def leftovers(self, queued: list[dict] = ()) -> list[dict]:
        """At the campaign's end: failures whose shrink never ran (`queued`, and those held back for a
        shrink that did not cover them). Per (backend, verdict, symptom), the one with the fewest
        features is kept as found and names one bucket that counts the rest; returns those kept."""
        groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
        for row in [*queued, *(r for rows in self.deferred.values() for r in rows)]:
            if self.covering(row) is None:
                groups[self.target(row).coarse].append(row)
        self.deferred.clear()
        kept = []
        for rows in groups.values():
            first = min(rows, key=lambda r: (len(features_of(r)), r.get("t") or 0))
            sig = self.target(first)
            bucket = self.buckets.setdefault(sig.bucket_id, Bucket(sig))
            for row in rows:
                self._count(bucket, row)
            if bucket.minimal is None:
                kept.append(first)
        return kept

    def _count(self, bucket: Bucket, row: dict) -> None:
        tally(bucket, row, self.keep_examples)

    def summary(self) -> list[Bucket]:
        return sorted(self.buckets.values(), key=lambda b: (b.signature.backend, -b.count))


def count_text(count: int, showing: int) -> str:
    """A bucket's count, and how many failing rows show its symptom where some of those are counted in another bucket
    (a row counts once, in the most general bucket showing its main symptom): a second bug's bucket would otherwise
    read as a bucket without rows."""
    return f"{count} (shown by {showing})" if showing > count else str(count)


def tally(bucket: Bucket, row: dict, keep_examples: int) -> None:
    """Count `row` in `bucket`: its count, the features beyond the minimal's, its first time, a few example ids."""
    bucket.count += 1
    bucket.others.update(features_of(row) - bucket.signature.features)
    if bucket.first_seen is None or (row.get("t") or 0) < bucket.first_seen:
        bucket.first_seen = row.get("t")
    if len(bucket.examples) < keep_examples and row.get("example_id"):
        bucket.examples.append(row["example_id"])


def _most_general(found: list[Bucket]) -> Bucket | None:
    return min(found, key=lambda b: (len(b.signature.features), b.id)) if found else None


def assign(rows: list[dict]) -> tuple[dict[str, Bucket], list[str | None]]:
    """Buckets of a finished campaign, recomputed from its rows, and each row's bucket id.

    Minimal rows define buckets (merged when their signatures are equal); each new failing
    generated row joins the most general bucket covering it; the rest are grouped per (backend,
    verdict, symptom) under the one with the fewest features, as the live `Buckets.leftovers` does.
    """
    buckets: dict[str, Bucket] = {}
    for r in rows:
        if r.get("phase") == "minimal" and is_new_failure(r) and not r.get("merged_into"):
            sig = signature(r)
            b = buckets.setdefault(sig.bucket_id, Bucket(sig, minimal=r))
            if b.minimal is None or (r.get("case_file") and not b.minimal.get("case_file")):
                b.minimal = r
    # A minimal case that a more general bucket covers is the same bug seen with extra features: fold it in.
    for b in sorted(buckets.values(), key=lambda b: -len(b.signature.features)):
        general = _most_general([a for a in buckets.values() if a is not b and b.minimal is not None
                                 and len(a.signature.features) < len(b.signature.features) and covers(a, b.minimal)])
        if general is not None:
            general.merged.append(b.minimal)
            del buckets[b.id]
    shrunk = list(buckets.values())
    failing = [r for r in rows if r.get("phase") in ("generate", "replay") and is_new_failure(r)]
    home: dict[int, Bucket] = {}
    uncovered: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in failing:
        found = explaining(shrunk, r)
        if found is not None:
            home[id(r)] = found
        else:
            uncovered[target(shrunk, r).coarse].append(r)
    for group in uncovered.values():
        first = min(group, key=lambda r: (len(features_of(r)), r.get("t") or 0))
        sig = target(shrunk, first)
        b = buckets.setdefault(sig.bucket_id, Bucket(sig))
        for r in group:
            home[id(r)] = b
    ids: list[str | None] = []
    for r in rows:
        b = home.get(id(r))
        if b is not None:
            tally(b, r, 3)
        ids.append(b.id if b else None)
    seen = Counter((r.get("backend"), features_of(r), pair) for r in failing for pair in row_symptoms(r))
    for b in buckets.values():  # `applies` and the symptom, over each distinct (backend, features, symptom) once
        sig = b.signature
        b.showing = sum(n for (backend, features, pair), n in seen.items()
                        if backend == sig.backend and sig.features <= features and pair == (sig.verdict, sig.symptom))
    return buckets, ids
