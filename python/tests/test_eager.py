"""The eager fast path (openmla/_eager.py): one preparation per distinct call, the custom op otherwise."""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import openmla
from openmla import _eager, flash_mla
from mla_reference import assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs


def test_repeated_shapes_prepare_once():
    x = make_dense_inputs([7, 70], h_q=16, page_size=64)
    _eager._dense_calls.clear()
    meta, _ = flash_mla.get_mla_metadata()
    for lengths in ([7, 70], [1, 2], [0, 64]):
        lens = torch.tensor(lengths, dtype=torch.int32)
        out, lse = flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, lens, 512, meta)
        assert_attention_close(out, lse, *dense_decode_ref(x.q, x.kv_cache, x.block_table, lens, default_scale()))
    assert len(_eager._dense_calls) == 1
    # Other strides (q's heads strided): a second preparation, and still the right result.
    q = torch.zeros(2, 1, 32, 576, dtype=x.q.dtype)[:, :, ::2]
    q.copy_(x.q)
    out, lse = openmla.dense_decode(q, x.kv_cache, x.block_table, x.seqlens, softmax_scale=default_scale())
    assert len(_eager._dense_calls) == 2
    assert_attention_close(out, lse, *dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale()))


def test_plan_checked_once_per_shape():
    x = make_dense_inputs([7, 70], h_q=16, page_size=64)
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table)
    for _ in range(3):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan)
    assert len(plan._checked_shapes) == 1


def test_fake_tensors_take_the_custom_op():
    x = make_dense_inputs([7, 70], h_q=16, page_size=64)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        q, kv, table, lens = (mode.from_tensor(t) for t in (x.q, x.kv_cache, x.block_table, x.seqlens))
        assert not _eager.applies(q)
        out, lse = openmla.dense_decode(q, kv, table, lens)
        assert out.shape == (2, 1, 16, 512) and lse.shape == (2, 16, 1)
