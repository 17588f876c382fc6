"""Values.source TABLE (reference/values.py): a large tensor's rows are runs of one fixed table of normal draws, at
offsets the case's generator draws; the draw is deterministic, normal, differs by seed, and leaves small tensors and
saved (GENERATOR) cases as they were."""
from __future__ import annotations

import dataclasses

import torch

import reference as r
from reference.inputs import materialize
from reference.values import TABLE_ABOVE, normal_table

LONG = r.Case(sequences=(r.SequenceSpec(query_len=4, encoder_len=4096),), attn_type=r.AttentionType.ENCODER_DECODER,
              num_heads=4, num_kv_heads=4, head_size=64, dtype=r.DType.FLOAT32,
              values=r.Values(source=r.ValueSource.TABLE), seed=5)


def _start_in_table(row: torch.Tensor) -> int:
    """Where `row` (flattened) starts in the table: the one offset whose run equals it."""
    table = normal_table()
    hits = (table == row[0]).nonzero().flatten().tolist()
    found = [h for h in hits if h + row.numel() <= table.numel() and torch.equal(table[h:h + row.numel()], row)]
    assert len(found) == 1, found
    return found[0]


def test_each_row_of_a_large_tensor_is_a_run_of_the_table():
    keys = materialize(LONG).keys[0]  # [4096, 4, 64]: 2^20 values, float32 as drawn
    rows = keys.reshape(keys.shape[0], -1)
    starts = [_start_in_table(rows[t]) for t in (0, 1, 2, 1000, 4095)]
    assert len(set(starts)) == len(starts)  # independent offsets, not one run cut into rows


def test_table_draws_are_standard_normal_and_rows_distinct():
    keys = materialize(LONG).keys[0].reshape(4096, -1)
    values = keys.flatten().double()
    assert abs(float(values.mean())) < 0.01 and abs(float(values.std()) - 1.0) < 0.01
    assert len(set(keys[:, 0].tolist())) >= 4090  # (4096 rows over 2^24 offsets: a few may share a start)


def test_the_same_case_draws_the_same_tensors_and_another_seed_others():
    a, b, c = materialize(LONG), materialize(LONG), materialize(LONG.replace(seed=6))
    assert torch.equal(a.keys[0], b.keys[0]) and torch.equal(a.values[0], b.values[0])
    assert not torch.equal(a.keys[0], c.keys[0])


def test_small_tensors_stay_with_the_generator():
    small = LONG.replace(sequences=(r.SequenceSpec(query_len=4, encoder_len=15),))  # 15 x 4 x 64 < TABLE_ABOVE
    assert 15 * 4 * 64 < TABLE_ABOVE
    generator = small.replace(values=dataclasses.replace(small.values, source=r.ValueSource.GENERATOR))
    a, b = materialize(small), materialize(generator)
    assert torch.equal(a.query, b.query) and torch.equal(a.keys[0], b.keys[0]) and torch.equal(a.values[0], b.values[0])


def test_a_saved_case_without_the_field_reads_as_the_generator():
    data = LONG.to_dict()
    del data["values"]["source"]
    assert r.Case.from_dict(data).values.source == r.ValueSource.GENERATOR
