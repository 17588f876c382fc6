"""FlashInfer's cascade and MLA repro templates call the library as the adapters do: on the CPU, a stand-in
FlashInfer records both calls, and the keys each request reads through its page metadata are the same tensors
(the script numbers its pages its own way, so the pages are compared by what they hold)."""
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


class _Recorder:
    calls: list[dict] = []

    def __init__(self, *args, **kwargs) -> None:
        self.layout = next((a for a in args if a in ("NHD", "HND")), "NHD")

    def plan(self, *args, **kwargs) -> None:
        self.planned = {"args": args, **kwargs}

    def run(self, *args, **kwargs):
        _Recorder.calls.append({"plan": self.planned, "layout": self.layout, "run_args": args, **kwargs})
        q = _joined(kwargs.get("query", args[0] if args else None))
        out = torch.zeros(q.shape[0], q.shape[1], self.planned.get("head_dim_ckv", q.shape[-1]))
        out = kwargs["out"].zero_() if kwargs.get("out") is not None else out
        return (out, torch.zeros(q.shape[0], q.shape[1])) if kwargs.get("return_lse") else out


def _joined(x):
    """A split (no-PE, PE) pair as the packed tensor it stands for."""
    return torch.cat(x, dim=-1) if isinstance(x, tuple) else x


def _fake_flashinfer(monkeypatch) -> None:
    root, mla = types.ModuleType("flashinfer"), types.ModuleType("flashinfer.mla")
    root.MultiLevelCascadeAttentionWrapper = _Recorder
    mla.BatchMLAPagedAttentionWrapper = _Recorder
    mla.MLAPlanMetadata = types.SimpleNamespace(csr=lambda **kw: kw)
    root.mla = mla
    monkeypatch.setitem(sys.modules, "flashinfer", root)
    monkeypatch.setitem(sys.modules, "flashinfer.mla", mla)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)  # the adapters time a first call
    _Recorder.calls = []


def _keys(pool: torch.Tensor, layout: str, indptr, indices, last, block_size: int) -> list[torch.Tensor]:
    """Each request's keys, read through FlashInfer's CSR page metadata, as float32 (NaN-comparable)."""
    pool = pool.transpose(1, 2) if layout == "HND" else pool  # [pages, block_size, ...]
    out = []
    for r in range(len(indptr) - 1):
        pages = indices[int(indptr[r]):int(indptr[r + 1])].long()
        rows = pool[pages].reshape(-1, *pool.shape[2:]).float()
        out.append(rows[:max(len(pages) - 1, 0) * block_size + int(last[r])] if len(pages) else rows)
    return out


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x.nan_to_num(7.0), y.nan_to_num(7.0))
                                     for x, y in zip(a, b))


def _both_calls(backend_name: str, case) -> tuple[dict, dict]:
    get(backend_name).run(materialize(case))
    call_kernel(load(write_repro(case, backend_name), device="cpu"))
    adapter, script = _Recorder.calls
    return adapter, script


def _draw(backend_name: str, limits: Limits) -> list:
    return drawn_cases(get(backend_name).caps, limits, 15)


def test_cascade_script_reads_the_adapter_s_keys_level_by_level(monkeypatch):
    for case in _draw("flashinfer-cascade", Limits(max_sequences=3, max_context=40, max_query=4)):
        _fake_flashinfer(monkeypatch)
        adapter, script = _both_calls("flashinfer-cascade", case)
        a, s = adapter["plan"], script["plan"]
        assert [x.tolist() for x in a["args"][0]] == [x.tolist() for x in s["args"][0]]  # query indptr per level
        assert a["args"][4:] == s["args"][4:]  # heads, kv heads, head size, page size
        assert {k: v for k, v in a.items() if k != "args"} == {k: v for k, v in s.items() if k != "args"}
        bs = case.cache.block_size
        for level in range(2):
            meta = [a["args"][i][level] for i in (1, 2, 3)], [s["args"][i][level] for i in (1, 2, 3)]
            for half in range(2):  # keys, values
                pool_a = adapter["run_args"][1]
                pool_a = pool_a[half] if isinstance(pool_a, tuple) else pool_a[:, half]
                read_a = _keys(pool_a, adapter["layout"], *meta[0], bs)
                read_s = _keys(script["run_args"][1][half], "NHD", *meta[1], bs)
                assert _same(read_a, read_s), (case, level, half)


def test_mla_script_reads_the_adapter_s_latents_with_its_scales(monkeypatch):
    for name in ("flashinfer-mla-fa2", "flashinfer-mla-fa3"):
        for case in _draw(name, Limits(max_sequences=3, max_context=40, max_query=4)):
            _fake_flashinfer(monkeypatch)
            adapter, script = _both_calls(name, case)
            a, s = dict(adapter["plan"]), dict(script["plan"])
            meta_a, meta_s = a.pop("metadata"), s.pop("metadata")
            assert a == s
            for key in ("qo_indptr", "kv_len_arr"):
                assert meta_a[key].tolist() == meta_s[key].tolist()
            bs = case.cache.block_size
            lens = meta_a["kv_len_arr"]
            # MLA's metadata carries key counts, not last-page counts
            last = [n - (-(-n // bs) - 1) * bs if n else 0 for n in lens.tolist()]
            read_a = _keys(_joined(adapter["kv_cache"]), "NHD", meta_a["kv_indptr"], meta_a["kv_indices"], last, bs)
            read_s = _keys(_joined(script["kv_cache"]), "NHD", meta_s["kv_indptr"], meta_s["kv_indices"], last, bs)
            assert _same(read_a, read_s), case
            assert torch.equal(_joined(adapter["query"]).float(), _joined(script["query"]).float())
            for arg in ("query", "kv_cache"):  # each spelled as the case says, in both
                assert isinstance(adapter[arg], tuple) == isinstance(script[arg], tuple) == (
                    case.encoding(f"{arg}_layout", "packed") == "split"), (arg, case.encodings)
            same = ("ckv_scale", "kpe_scale", "return_lse_base_on_e")
            assert {k: adapter.get(k) for k in same} == {k: script.get(k) for k in same}
            assert (adapter.get("out") is None) == (script.get("out") is None) == (
                case.encoding("output", "returned") == "returned")


@pytest.mark.parametrize("name", ["flashinfer-cascade", "flashinfer-mla-fa2", "torch-varlen"])
def test_the_new_templates_reference_is_the_oracle(name):
    from tests.reports.test_repro import assert_script_reference_is_the_oracle

    for case in _draw(name, Limits(max_sequences=3, max_context=40, max_query=4))[:8]:
        assert_script_reference_is_the_oracle(case, name)
