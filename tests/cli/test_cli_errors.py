"""Every bad input to the command line is one line naming the field and what is allowed, exit 2."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.main import main
from reference.case import Case, SequenceSpec

JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
CASE_KEYS = ["sequences", "attn_type", "num_heads", "num_kv_heads", "head_size", "dtype", "sliding_window", "cache",
             "seed", "window", "sinks", "alibi", "values", "query_len", "bogus"]
CASE_LIKE = st.dictionaries(st.sampled_from(CASE_KEYS), JSON, max_size=5) | st.fixed_dictionaries(
    {"sequences": st.lists(st.dictionaries(st.sampled_from(["query_len", "context_len", "key_len", "x"]),
                                           st.integers(-3, 3) | st.text(max_size=2), max_size=3), max_size=2)},
    optional={"attn_type": st.sampled_from(["decoder", "bogus", "kernel"]), "num_kv_heads": st.integers(-1, 5)})


def _one_line_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=JSON | CASE_LIKE, wrap=st.booleans())
def test_random_json_to_replay_is_a_verdict_or_a_one_line_error(tmp_path_factory, capsys, payload, wrap):
    path = tmp_path_factory.mktemp("case") / "case.json"
    path.write_text(json.dumps({"backend": "torch-sdpa-math", "case": payload} if wrap else payload))
    code = main(["replay", str(path), "--backend", "torch-sdpa-math"])
    if code == 2:
        _one_line_error(capsys, code)
    else:
        assert code in (0, 1)  # a valid case: evaluated


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=JSON | st.dictionaries(st.sampled_from(["max_context", "dtypes", "head_sizes", "max_contxt", "attn_types"]),
                                      JSON, min_size=1, max_size=2))
def test_random_limits_are_accepted_or_a_one_line_error(capsys, payload):
    from fuzz.strategies import LimitsError, limits_from_json

    try:
        limits_from_json(json.dumps(payload))
    except LimitsError as e:
        assert "\n" not in str(e) and "--limits" in str(e)


@pytest.mark.parametrize("text,where", [('{"sequences": [{"query_len": -3}]}', "query_len"),
                                        ('{"sequences": [{"query_len": 2}], "attn_type": "bogus"}', "attn_type"),
                                        ("{not json", "line 1 column 2"),
                                        ('{"sequences": [{"query_len": 2}], "extra": 1}', "extra")])
def test_the_issue_s_bad_case_files(tmp_path, capsys, text, where):
    path = tmp_path / "case.json"
    path.write_text(text)
    err = _one_line_error(capsys, main(["replay", str(path), "--backend", "torch-sdpa-math"]))
    assert where in err


@pytest.mark.parametrize("args,where", [
    (["fuzz", "--limits", '{"max_contxt": 5}'], "allowed: attn_types"),
    (["fuzz", "--limits", "{max"], "not JSON"),
    (["fuzz", "--backend", "no-such-backend"], "not available here"),
    (["--backend-spec", "nonexistent.module:x", "backends"], "cannot import nonexistent"),
    (["report", "/nonexistent/results"], "no such results directory"),
])
def test_bad_command_lines(capsys, args, where):
    assert where in _one_line_error(capsys, main(args))


def test_an_unwritable_out_directory_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["fuzz", "--backend", "torch-sdpa-math", "--examples", "1", "--out", str(blocker / "sub"), "--quiet"])
    assert "cannot write" in _one_line_error(capsys, code)


def test_an_unwritable_profile_folder_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["fuzz", "--backend", "torch-sdpa-math", "--examples", "1", "--out", str(tmp_path / "out"), "--quiet",
                 "--profile", str(blocker / "sub")])
    assert "--profile" in _one_line_error(capsys, code)


def test_schema_is_generated_from_the_case_and_validates_case_files(capsys):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema arrives with the ray extra")
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    good = Case(sequences=(SequenceSpec(query_len=2, context_len=3),)).to_dict()
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(dict(good, attn_type="bogus"), schema)
    assert set(schema["properties"]) == set(good)


def test_sanitize_without_the_tool_says_where_to_get_it(tmp_path, capsys, monkeypatch):
    import cli.sanitize

    monkeypatch.setattr(cli.sanitize, "find_sanitizer", lambda: None)
    path = tmp_path / "case.json"
    path.write_text(json.dumps({"backend": "torch-sdpa-math", "case": Case(sequences=(SequenceSpec(2),)).to_dict()}))
    assert "compute-sanitizer not found" in _one_line_error(capsys, main(["replay", str(path), "--sanitize"]))


def test_sanitizer_error_summaries_are_counted():
    from cli.sanitize import error_count, error_kinds

    assert error_count("========= Invalid __global__ read of size 4\n========= ERROR SUMMARY: 3 errors\n") == 3
    assert error_count("========= ERROR SUMMARY: 0 errors") == 0 and error_count("") == 0
    report = ("========= Invalid __shared__ write of size 16 bytes\n=========     at kernel+0x10\n"
              "========= Invalid __shared__ write of size 16 bytes\n========= Program hit CUDA_ERROR_INVALID_VALUE\n")
    assert error_kinds(report) == {"Invalid __shared__ write of size 16 bytes": 2}


def test_a_sanitized_replay_that_runs_too_long_is_stopped_and_the_case_file_says_so(tmp_path, capsys, monkeypatch):
    import cli.sanitize

    slow = tmp_path / "compute-sanitizer"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(cli.sanitize, "find_sanitizer", lambda: str(slow))
    path = tmp_path / "case.json"
    path.write_text(json.dumps({"backend": "torch-sdpa-math", "case": Case(sequences=(SequenceSpec(2),)).to_dict()}))
    assert main(["replay", str(path), "--sanitize", "--sanitize-timeout", "1"]) == 1
    assert json.loads(path.read_text())["sanitizer"]["memcheck"]["timed_out_after_s"] == 1.0
