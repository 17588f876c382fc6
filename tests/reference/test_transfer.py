"""One-copy moves (reference/transfer.py): every tensor of a case comes back with its shape, strides, dtype and
bytes, whatever its memory order; the packing path is the one a CUDA move takes (here the buffer's copy to the
CPU is the identity, so what is checked is the packing and the views)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from fuzz.strategies import ORACLE_CAPS, Limits, cases
from reference import transfer
from reference.inputs import map_tensors, materialize, to_device


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, strides, dtype and bytes (NaN canaries compare equal as bytes)."""
    def raw(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous().reshape(-1).view(torch.uint8)

    return a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride() and torch.equal(raw(a), raw(b))


def test_every_kind_of_tensor_keeps_shape_strides_dtype_and_bytes():
    tensors = [torch.randn(3, 4, 5).permute(2, 0, 1), torch.arange(7, dtype=torch.int32), torch.zeros(0, 3),
               torch.tensor(True), torch.randn(4, 6)[:, :3], torch.randn(2, 3).to(torch.float8_e4m3fn),
               torch.randn(5).to(torch.bfloat16), torch.randn(2, 3, 4).expand(5, 2, 3, 4)]
    moved = transfer.move_all(tensors, torch.device("cpu"))
    assert all(same(a, b) for a, b in zip(tensors, moved))
    # the dense ones are views of one buffer, each at an aligned offset; the strided slice and the broadcast
    # one (not dense) are moved on their own
    assert [transfer._dense(t) for t in tensors] == [True, True, True, True, False, True, True, False]
    packed = [b for a, b in zip(tensors, moved) if transfer._dense(a) and a.numel()]
    assert len({b.untyped_storage().data_ptr() for b in packed}) == 1
    assert all(b.storage_offset() * b.element_size() % transfer.ALIGN == 0 for b in packed)


@settings(max_examples=60, deadline=None)
@given(cases(ORACLE_CAPS, Limits(tiers=("small",))))
def test_a_cases_inputs_come_back_equal(case):
    inputs = materialize(case)
    staged: list[torch.Tensor] = []
    map_tensors(inputs, lambda t: staged.append(t) or t)
    moved = transfer.move_all(staged, torch.device("cpu"))
    assert all(same(a, b) for a, b in zip(staged, moved))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA device: the one-copy move is what to_device does there")
@settings(max_examples=40, deadline=None)
@given(cases(ORACLE_CAPS, Limits(tiers=("small", "tile"))))
def test_to_device_equals_moving_each_tensor(case):
    inputs = materialize(case)
    one_copy = to_device(inputs, "cuda")
    each: list[torch.Tensor] = []
    map_tensors(inputs, lambda t: each.append(t.to("cuda")) or t)
    got: list[torch.Tensor] = []
    map_tensors(one_copy, lambda t: got.append(t) or t)
    assert len(got) == len(each) and all(same(a.cpu(), b.cpu()) and a.stride() == b.stride() for a, b in zip(got, each))
    assert all(t.device.type == "cuda" for t in got)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA device: the host-to-GPU copy that does not wait")
def test_a_move_to_the_gpu_does_not_wait_and_arrives_whole():
    """Each waiting copy was a turn of a GPU 16 workers share (reference/transfer.py): the host goes on, and the
    stream's next work still reads every byte, also after the host's buffers are freed and reused."""
    tensors = [torch.randn(64, 8, 128), torch.arange(9, dtype=torch.int32), torch.randn(3, 5).t(), torch.zeros(0)]
    torch.cuda.set_sync_debug_mode("error")
    try:
        batches = [transfer.move_all(tensors, torch.device("cuda")) for _ in range(8)]
        one = transfer.move(torch.arange(5), torch.device("cuda"))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(same(a, b.cpu()) for moved in batches for a, b in zip(tensors, moved))
    assert torch.equal(one.cpu(), torch.arange(5))
