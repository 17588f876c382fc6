"""Case files in and out of the command line: one-line errors, and the Case's JSON Schema.

Types, enums and required fields are checked by pydantic against the Case dataclasses themselves
(so the schema is generated from the model, never written twice); the semantics (lengths, head
ratios, layouts) by `reference.validation.validate`. Any error is one line naming the file, the field and
what is allowed.
"""
from __future__ import annotations

import json
from pathlib import Path

from reference.case import Case, CaseError


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def case_schema() -> dict:
    """The JSON Schema of a Case file's `case` object (pydantic, from the dataclasses)."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(Case).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["description"] = ("An attnref Case: one attention batch, every tensor fixed by `seed`. A case file is "
                             "either this object or {\"backend\": NAME, \"case\": <this object>, ...}.")
    return schema


def parse_case(data: object, where: str = "case") -> Case:
    """A Case from decoded JSON, or UsageError naming the field, the value and what is allowed."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: a JSON object with the Case fields, got {type(data).__name__}")
    try:
        from pydantic import TypeAdapter, ValidationError
    except ImportError:  # pydantic is a dependency; without it the dataclass checks still name the field
        TypeAdapter = None
    if TypeAdapter is not None:
        try:
            TypeAdapter(Case).validate_python(data)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if not loc:  # a semantic check of reference.validation.validate: its message names the field
                raise UsageError(f"{where}: {msg}") from None
            raise UsageError(f"{where}: Case.{loc}={err.get('input')!r}: {msg}") from None
    try:
        return Case.from_dict(data)
    except CaseError as e:
        raise UsageError(f"{where}: {e}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{where}: not a valid Case: {e}") from None


def load_case_file(path: str) -> tuple[Case, dict]:
    """(Case, the file's whole payload) from a case file: a bare Case or {"backend", "case", ...}."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if isinstance(payload, dict) and "case" in payload:
        return parse_case(payload["case"], f"{path}: case"), payload
    return parse_case(payload, path), payload if isinstance(payload, dict) else {}
