"""openmla.flash_mla: FlashMLA's signatures and conventions, both metadata styles (CPU tensors)."""

import inspect

import pytest
import torch

from openmla import flash_mla
from openmla.flash_mla import FlashMLASchedMeta, flash_mla_sparse_fwd, flash_mla_with_kvcache, get_mla_metadata
from mla_reference import (TOKEN_BYTES, assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs,
                           quantize_sparse_tokens, random_indices, sparse_decode_ref, sparse_prefill_ref)


def test_signatures_match_flash_mla():
    params = list(inspect.signature(flash_mla_with_kvcache).parameters)
    assert params[:13] == ["q", "k_cache", "block_table", "cache_seqlens", "head_dim_v", "tile_scheduler_metadata",
                           "num_splits", "softmax_scale", "causal", "is_fp8_kvcache", "indices", "attn_sink",
                           "topk_length"]
    assert list(inspect.signature(flash_mla_sparse_fwd).parameters)[:7] == [
        "q", "kv", "indices", "sm_scale", "d_v", "attn_sink", "topk_length"]
    old = inspect.signature(flash_mla._old_style_metadata).parameters
    assert list(old) == ["cache_seqlens", "num_q_tokens_per_head_k", "num_heads_k", "num_heads_q", "is_fp8_kvcache",
                         "topk"]


def test_new_style_metadata_filled_on_first_use():
    x = make_dense_inputs([0, 20, 70], s_q=2, h_q=16, page_size=64, capacity=[10, 64, 70])
    meta, none = get_mla_metadata()
    assert isinstance(meta, FlashMLASchedMeta) and none is None and not meta.have_initialized
    out, lse = flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, None, causal=True)
    assert meta.have_initialized and meta.plan is not None
    assert meta.tile_scheduler_metadata.numel() == meta.plan.workspace_bytes
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), causal=True)
    assert_attention_close(out, lse, out_ref, lse_ref)
    # Same shapes, new lengths: the metadata stays valid (the schedule is rebuilt per call).
    lens = torch.tensor([5, 64, 1], dtype=torch.int32)
    out, lse = flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, lens, 512, meta, None, causal=True)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, lens, default_scale(), causal=True)
    assert_attention_close(out, lse, out_ref, lse_ref)
    # Other shapes: named, like FlashMLA's consistency asserts.
    with pytest.raises(ValueError, match=r"argument 'tile_scheduler_metadata' was filled for other arguments: got "
                                         r"causal = False, expected causal = True"):
        flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, None, causal=False)


def test_old_style_metadata_is_workspace():
    x = make_dense_inputs([9, 100], s_q=1, h_q=16, page_size=64)
    tile_md, num_splits = get_mla_metadata(x.seqlens, 1 * 16 // 1, 1)
    assert tile_md.dtype == torch.int32 and num_splits.dtype == torch.int32 and num_splits.shape == (3,)
    out, lse = flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, tile_md, num_splits)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale())
    assert_attention_close(out, lse, out_ref, lse_ref)
    # With num_heads_q, and the sparse form (topk) that needs it.
    md, _ = get_mla_metadata(x.seqlens, 2 * 64, 1, num_heads_q=64)
    assert md.numel() * 4 >= flash_mla.DensePlan(batch=2, s_q=2, h_q=64, num_pages=1, max_pages_per_seq=1,
                                                 device="cpu").workspace_bytes
    md, _ = get_mla_metadata(x.seqlens, 64, 1, num_heads_q=64, is_fp8_kvcache=True, topk=2048)
    assert md.numel() > 0
    with pytest.raises(ValueError, match=r"get_mla_metadata: argument 'num_heads_q' is missing"):
        get_mla_metadata(x.seqlens, 64, 1, topk=2048)


def test_metadata_none_and_defaults():
    x = make_dense_inputs([30, 1], s_q=1, h_q=16, page_size=64, d_qk=512)
    out, lse = flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, None)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, 512 ** -0.5)
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_fp8_dense_with_descales():
    x = make_dense_inputs([30, 65], h_q=16, page_size=64, dtype=torch.float8_e4m3fn)
    dq, dk = torch.tensor([0.03]), torch.tensor([0.07])
    out, lse = flash_mla_with_kvcache(x.q, x.kv_cache.view(torch.uint8), x.block_table, x.seqlens, 512, None,
                                      is_fp8_kvcache=True, descale_q=dq, descale_k=dk)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), q_scale=dq,
                                        kv_scale=dk)
    assert out.dtype == torch.bfloat16
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_sparse_decode_through_flash_mla():
    b, s_q, h_q, topk, pages = 2, 2, 64, 128, 4
    cache = quantize_sparse_tokens(torch.randn(pages * 64, 576)).reshape(pages, 64, 1, TOKEN_BYTES)
    cache = cache.view(torch.float8_e4m3fn)
    q = torch.randn(b, s_q, h_q, 576).bfloat16()
    indices = random_indices((b, s_q, topk), pages * 64)
    lengths = torch.tensor([100, 64], dtype=torch.int32)
    sink = torch.randn(h_q)
    meta, _ = get_mla_metadata()
    out, lse = flash_mla_with_kvcache(q, cache, None, None, 512, meta, None, is_fp8_kvcache=True, indices=indices,
                                      attn_sink=sink, topk_length=lengths)
    out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale(), lengths, sink)
    assert_attention_close(out, lse, out_ref, lse_ref)
    with pytest.raises(ValueError, match=r"argument 'is_fp8_kvcache' must be True with indices"):
        flash_mla_with_kvcache(q, cache, None, None, 512, None, indices=indices)
    with pytest.raises(ValueError, match=r"argument 'causal' must be False with indices"):
        flash_mla_with_kvcache(q, cache, None, None, 512, None, causal=True, is_fp8_kvcache=True, indices=indices)


def test_dense_rejects_sparse_only_arguments():
    x = make_dense_inputs([3], h_q=16, page_size=64)
    with pytest.raises(ValueError, match=r"argument 'attn_sink' needs indices"):
        flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, None, attn_sink=torch.zeros(16))
    with pytest.raises(ValueError, match=r"argument 'cache_seqlens' is missing"):
        flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, None, 512, None)
    with pytest.raises(TypeError, match=r"argument 'tile_scheduler_metadata' has an unsupported type"):
        flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, "metadata")


def test_workspace_too_small_is_named():
    if not torch.cuda.is_available():
        pytest.skip("the CPU backend ignores the workspace")
    x = make_dense_inputs([30, 70], h_q=64, page_size=64, device="cuda")
    with pytest.raises(ValueError, match=r"^dense_decode_run: argument 'workspace(_bytes)?' "):
        flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                               torch.zeros(4, dtype=torch.int32, device="cuda"))


def test_sparse_prefill_cpu_reference():
    q = torch.randn(4, 16, 576).bfloat16()
    kv = torch.randn(200, 1, 576).bfloat16()
    indices = random_indices((4, 1, 64), 200)
    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, indices, 0.04)
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, kv, indices, 0.04)
    assert out.shape == (4, 16, 512) and max_logits.shape == (4, 16) and lse.shape == (4, 16)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)
    with pytest.raises(NotImplementedError, match=r"argument 'indexer_topk' is not supported"):
        flash_mla_sparse_fwd(q, kv, indices, 0.04, indexer_topk=512)
