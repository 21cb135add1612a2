"""Batch-invariant mode's Python plumbing (docs/batch_invariance.md): plans, the keyword on the entry
points and the custom ops, and the FlashMLA drop-in's switch. CPU tensors (the C++ reference); the
bitwise GPU checks are tests/gpu/test_batch_invariance.cu."""

import pytest
import torch

import openmla
from openmla import _C, _eager, flash_mla
from mla_reference import (assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs,
                           quantize_sparse_tokens, random_indices, sparse_decode_ref, sparse_prefill_ref, TOKEN_BYTES)

CPU = _C.DeviceInfo()  # 132 SMs, sm_90 (a plan needs no GPU)


def test_plans_carry_the_mode_and_the_chunk():
    default = openmla.DensePlan(batch=8, h_q=16, num_pages=64, max_pages_per_seq=64, device=CPU)
    invariant = openmla.DensePlan(batch=8, h_q=16, num_pages=64, max_pages_per_seq=64, device=CPU,
                                  batch_invariant=True)
    assert not default.batch_invariant and default.chunk_blocks == 0
    assert invariant.batch_invariant and invariant.chunk_blocks == 32
    assert invariant.num_parts == 8 * (64 // 32)  # a part per possible chunk: 4096 tokens, 32-block chunks
    assert invariant.num_slots == invariant.num_parts
    assert invariant.options.batch_invariant
    sparse = openmla.SparsePlan(batch=4, s_q=2, h_q=128, topk=2048, num_pages=16, device=CPU, batch_invariant=True)
    assert sparse.chunk_blocks == 128 and sparse.num_parts == 8 and sparse.num_slots == 0  # one chunk per row
    x = make_dense_inputs([5, 300], h_q=16)
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table, device=CPU, batch_invariant=True)
    assert plan.batch_invariant and plan.chunk_blocks == 32


def test_plan_options_binding():
    options = _C.PlanOptions()
    assert options.batch_invariant is False and options.chunk_blocks == 0
    options.batch_invariant, options.chunk_blocks = True, 4
    shape = _C.DenseDecodeShape()
    shape.batch, shape.h_q, shape.num_pages, shape.max_pages_per_seq = 2, 16, 8, 4
    plan = _C.plan_dense_decode(shape, CPU, options)
    assert plan.chunk_blocks == 4 and plan.num_parts == 2


def test_options_that_fix_the_split_are_refused():
    with pytest.raises(ValueError, match="batch_invariant"):
        openmla.DensePlan(batch=2, h_q=16, num_pages=8, max_pages_per_seq=4, device=CPU, max_parts=1,
                          batch_invariant=True)


def test_dense_keyword_matches_the_reference_and_is_bitwise_batch_invariant():
    lengths = [700, 0, 1, 2100]
    x = make_dense_inputs(lengths, h_q=16)
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, batch_invariant=True)
    assert_attention_close(out, lse, *dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale()))
    # Request 3 alone and at another position: the same bits.
    alone, alone_lse = openmla.dense_decode(x.q[3:], x.kv_cache, x.block_table[3:], x.seqlens[3:],
                                            batch_invariant=True)
    assert torch.equal(alone[0], out[3]) and torch.equal(alone_lse[0], lse[3])
    order = torch.tensor([3, 0, 2])
    moved, moved_lse = openmla.dense_decode(x.q[order], x.kv_cache, x.block_table[order], x.seqlens[order],
                                            batch_invariant=True)
    assert torch.equal(moved[0], out[3]) and torch.equal(moved_lse[0], lse[3])


def test_dense_with_an_invariant_plan_and_workspace():
    x = make_dense_inputs([700, 2100], h_q=16)
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table, device=CPU, batch_invariant=True)
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan,
                                    workspace=plan.alloc_workspace("cpu"))
    assert_attention_close(out, lse, *dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale()))
    # The keyword may repeat the plan's mode, not contradict it.
    openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan, batch_invariant=True)
    default_plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table, device=CPU)
    with pytest.raises(ValueError, match=r"^dense_decode: argument 'batch_invariant' disagrees with the plan"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=default_plan, batch_invariant=True)
    with pytest.raises(TypeError, match=r"^dense_decode: argument 'batch_invariant' must be a bool"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, batch_invariant=1)


def test_sparse_keyword():
    cache = quantize_sparse_tokens(torch.randn(256, 576)).reshape(4, 64, 1, TOKEN_BYTES)
    q = torch.randn(3, 2, 16, 576).bfloat16()
    indices = random_indices((3, 2, 2048), 256)
    topk_length = torch.tensor([2048, 5, 1500], dtype=torch.int32)
    out, lse = openmla.sparse_decode(q, cache, indices, topk_length=topk_length, batch_invariant=True)
    assert_attention_close(out, lse, *sparse_decode_ref(q, cache, indices, default_scale(), topk_length=topk_length))
    alone, alone_lse = openmla.sparse_decode(q[2:], cache, indices[2:], topk_length=topk_length[2:],
                                             batch_invariant=True)
    assert torch.equal(alone[0], out[2]) and torch.equal(alone_lse[0], lse[2])
    plan = openmla.SparsePlan.for_tensors(q, cache, indices, device=CPU)
    with pytest.raises(ValueError, match=r"^sparse_decode: argument 'batch_invariant' disagrees with the plan"):
        openmla.sparse_decode(q, cache, indices, plan=plan, batch_invariant=True)


def test_prefill_keyword():
    # Each token's results alone equal its results within the larger call (bitwise), and match the reference.
    q = torch.randn(5, 16, 576).bfloat16()
    kv = torch.randn(300, 1, 576).bfloat16()
    indices = random_indices((5, 1, 128), 300)
    topk_length = torch.tensor([128, 3, 0, 64, 100], dtype=torch.int32)
    out, max_logits, lse = openmla.sparse_prefill(q, kv, indices, topk_length=topk_length, batch_invariant=True)
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, kv, indices, default_scale(), topk_length=topk_length)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)
    alone = openmla.sparse_prefill(q[3:4], kv, indices[3:4], topk_length=topk_length[3:4], batch_invariant=True)
    assert all(torch.equal(a[0], b[3]) for a, b in zip(alone, (out, max_logits, lse)))
    with pytest.raises(TypeError, match=r"^sparse_prefill: argument 'batch_invariant' must be a bool"):
        openmla.sparse_prefill(q, kv, indices, batch_invariant=1)


def test_custom_ops_take_the_flag():
    x = make_dense_inputs([100, 900], h_q=16)
    out, lse = torch.ops.openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, None, None, None,
                                              default_scale(), False, 512, 0, 0, 0, True)
    assert_attention_close(out, lse, *dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale()))
    schema = str(torch.ops.openmla.dense_decode.default._schema)
    assert "bool batch_invariant=False" in schema
    assert "bool batch_invariant=False" in str(torch.ops.openmla.sparse_decode.default._schema)
    assert "bool batch_invariant=False" in str(torch.ops.openmla.sparse_prefill.default._schema)


def _recording(monkeypatch, name):
    seen = []
    original = getattr(_eager, name)

    def record(*args, **kwargs):
        seen.append(kwargs.get("batch_invariant", args[17] if len(args) > 17 else None))
        return original(*args, **kwargs)

    monkeypatch.setattr(_eager, name, record)
    return seen


def test_drop_in_uses_the_mode_for_a_caller_made_metadata(monkeypatch):
    seen = _recording(monkeypatch, "dense_decode")
    x = make_dense_inputs([30, 700], h_q=16)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta)
    meta_invariant, _ = flash_mla.get_mla_metadata()
    meta_invariant.tile_scheduler_metadata = torch.zeros(1, 8, dtype=torch.int32)  # vLLM's batch-invariant mode
    out_invariant, lse_invariant = flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                                                    meta_invariant)
    assert seen == [False, True]
    ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale())
    assert_attention_close(out, lse, *ref)
    assert_attention_close(out_invariant, lse_invariant, *ref)


def test_drop_in_environment_switch(monkeypatch):
    for value, expected in (("1", True), ("true", True), ("0", False), ("", False), ("off", False)):
        monkeypatch.setenv("OPENMLA_BATCH_INVARIANT", value)
        assert flash_mla._env_flag("OPENMLA_BATCH_INVARIANT") is expected
    monkeypatch.delenv("OPENMLA_BATCH_INVARIANT")
    assert flash_mla._env_flag("OPENMLA_BATCH_INVARIANT") is False
    seen = _recording(monkeypatch, "dense_decode")
    monkeypatch.setattr(flash_mla, "_BATCH_INVARIANT", True)
    x = make_dense_inputs([30, 70], h_q=16)
    meta, _ = flash_mla.get_mla_metadata()
    flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta)
    assert seen == [True]
