"""vLLM's FA3 / FA4 repro template calls flash_attn_varlen_func as the adapters do: on the CPU, a stand-in
vllm records both calls; every argument is the same, and the keys each sequence reads through the block table
are the same tensors (the script numbers its pages its own way)."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from backends.registry import get
from fuzz.strategies import Limits
from reference.inputs import materialize
from reports.repro import write_repro
from tests.repro_scripts import call_kernel, drawn_cases, load


def _fake_vllm(monkeypatch, calls: list) -> None:
    def varlen(q, k, v, **kw):
        calls.append(dict(kw, q=q, k=k, v=v))
        out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1])
        return out, torch.zeros(q.shape[1], q.shape[0])

    flash = types.ModuleType("vllm.vllm_flash_attn")
    flash.flash_attn_varlen_func = varlen
    flash.get_scheduler_metadata = lambda **kw: ("scheduled", kw)
    rules = types.ModuleType("vllm.v1.attention.backends.flash_attn")
    rules._make_rswa_mask_mod = lambda: ("rswa",)
    rules._make_mm_prefix_mask_mod = lambda *a, **kw: ("mm", a, kw)
    for name in ("vllm", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.backends"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.vllm_flash_attn", flash)
    monkeypatch.setitem(sys.modules, "vllm.v1.attention.backends.flash_attn", rules)


def _plain(x):
    """A call's argument as comparable data: tensors as float lists (NaN-safe), containers element-wise."""
    if isinstance(x, torch.Tensor):
        return x.float().nan_to_num(7.0).tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(y) for y in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _read(call: dict, half: str) -> list:
    """Each sequence's keys (values), read through the call's block table and seqused_k."""
    pool, table, lens = call[half], call["block_table"], call["seqused_k"]
    bs = pool.shape[1]
    return [_plain(pool[table[i, :-(-int(n) // bs)].long()].reshape(-1, *pool.shape[2:])[:int(n)])
            for i, n in enumerate(lens)]


PAGED = ("block_table", "seqused_k", "k", "v", "out")


@pytest.mark.parametrize("name", ["vllm-fa3-paged", "vllm-fa4-paged"])
def test_the_script_calls_vllm_s_flash_attention_as_the_adapter_does(monkeypatch, name):
    backend = get(name)
    drawn = [case for case in drawn_cases(backend.caps, Limits(max_sequences=3, max_context=40, max_query=4), 40)
             if not backend.not_supported_reasons(case)]
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())  # vLLM's config packages "present"
    assert len(drawn) >= 10
    for case in drawn:
        calls: list = []
        _fake_vllm(monkeypatch, calls)
        backend.run(materialize(case))
        call_kernel(load(write_repro(case, name), device="cpu"))
        adapter, script = calls
        assert _read(adapter, "k") == _read(script, "k") and _read(adapter, "v") == _read(script, "v"), case
        plain = {k: v for k, v in adapter.items() if k not in PAGED}, {k: v for k, v in script.items() if k not in PAGED}
        for scheduled in plain:
            if "scheduler_metadata" in scheduled:  # its cache_seqlens are seqused_k, compared above
                scheduled["scheduler_metadata"][1].pop("cache_seqlens")
        assert _plain(plain[0]) == _plain(plain[1]), case


def test_the_fa4_script_of_the_catalogued_convention_drops_the_ranges_as_flash_attn_does(monkeypatch):
    import json
    import pathlib

    from reference.case import Case

    saved = json.loads(pathlib.Path("benchmarks/results/cases/vllm-fa4-paged-rswa-drops-prefix-lm.json").read_text())
    case = Case.from_dict(saved["case"])
    calls: list = []
    _fake_vllm(monkeypatch, calls)
    ns = load(write_repro(case, "vllm-fa4-paged"), device="cpu")
    call_kernel(ns)
    assert calls[0]["mask_mod"] == ("rswa",) and calls[0]["window_size"] is None
    assert ns["RANGES"] is not None  # the script's reference keeps them: its exit 1 is the dropped ranges
