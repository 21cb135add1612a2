"""CPU tensors run the C++ reference: compare it, through the Python API, with a torch float32 reference."""

import pytest
import torch

import openmla
from mla_reference import (TOKEN_BYTES, assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs,
                           quantize_sparse_tokens, random_indices, sparse_decode_ref, sparse_prefill_ref)


@pytest.mark.parametrize("lengths, s_q, h_q, h_kv, page_size, causal, dtype", [
    ([0, 1, 37, 64, 130], 1, 16, 1, 64, False, torch.bfloat16),   # empty, single token, partial pages
    ([17, 100], 2, 16, 1, 16, True, torch.bfloat16),              # MTP, causal, page 16
    ([5, 33, 70], 4, 8, 1, 1, True, torch.float16),               # page size 1 (SGLang), fp16
    ([50, 3], 3, 16, 2, 32, True, torch.bfloat16),                # two KV heads, causal shorter than s_q
    ([40, 0, 90], 1, 10, 1, 128, False, torch.bfloat16),          # irregular head count, page 128
])
def test_dense_decode_matches_torch(lengths, s_q, h_q, h_kv, page_size, causal, dtype):
    x = make_dense_inputs(lengths, s_q=s_q, h_q=h_q, h_kv=h_kv, page_size=page_size, dtype=dtype)
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, causal=causal)
    assert out.dtype == dtype and out.shape == (len(lengths), s_q, h_q, 512)
    assert lse.dtype == torch.float32 and lse.shape == (len(lengths), h_q, s_q)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), causal)
    assert_attention_close(out, lse, out_ref, lse_ref)
    for i, n in enumerate(lengths):
        if n == 0:
            assert torch.all(out[i] == 0) and torch.all(torch.isposinf(lse[i]))


def test_dense_decode_latent_only_and_scale():
    x = make_dense_inputs([20, 77], h_q=16, page_size=16, d_qk=512)
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, softmax_scale=0.1)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, 0.1)
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_dense_decode_fp8_per_tensor():
    x = make_dense_inputs([30, 65], h_q=16, page_size=64, dtype=torch.float8_e4m3fn)
    q_scale, kv_scale = torch.tensor([0.02]), torch.tensor([0.05])
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, q_scale=q_scale, kv_scale=kv_scale)
    assert out.dtype == torch.bfloat16
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(),
                                        q_scale=q_scale, kv_scale=kv_scale)
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_dense_decode_strided_views():
    # q and kv as views of larger buffers: strides travel to C++ unchanged.
    x = make_dense_inputs([25, 40], s_q=2, h_q=16, page_size=16)
    q_big = torch.zeros(2, 2, 32, 576, dtype=torch.bfloat16)
    q_big[:, :, ::2] = x.q
    q_view = q_big[:, :, ::2]
    table_big = torch.zeros(2, 8, dtype=torch.int32)
    table_big[:, : x.block_table.shape[1]] = x.block_table
    out, lse = openmla.dense_decode(q_view, x.kv_cache, table_big[:, : x.block_table.shape[1]], x.seqlens)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale())
    assert_attention_close(out, lse, out_ref, lse_ref)


def _sparse_cache(num_pages, page_size, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(num_pages * page_size, 576, generator=gen)
    return quantize_sparse_tokens(rows).reshape(num_pages, page_size, 1, TOKEN_BYTES)


@pytest.mark.parametrize("s_q, h_q, topk, with_length, with_sink", [
    (1, 16, 64, False, False),
    (2, 64, 128, True, True),
])
def test_sparse_decode_matches_torch(s_q, h_q, topk, with_length, with_sink):
    b, num_pages, page_size = 3, 6, 64
    cache = _sparse_cache(num_pages, page_size)
    indices = random_indices((b, s_q, topk), num_pages * page_size)
    q = torch.randn(b, s_q, h_q, 576).bfloat16()
    topk_length = torch.tensor([topk, 0, topk // 3], dtype=torch.int32) if with_length else None
    sink = torch.randn(h_q) if with_sink else None
    if with_sink:
        sink[0], sink[1] = float("inf"), -float("inf")
    plan = openmla.SparsePlan.for_tensors(q, cache, indices)
    out, lse = openmla.sparse_decode(q, cache.view(torch.float8_e4m3fn), indices, plan=plan, topk_length=topk_length,
                                     attn_sink=sink)
    out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale(), topk_length, sink)
    assert_attention_close(out, lse, out_ref, lse_ref)
    if with_sink:
        assert torch.all(out[:, :, 0] == 0)  # sink = +inf zeroes the output, lse unchanged


def test_sparse_decode_padded_page_stride():
    # The page stride may exceed page_size * 656 bytes.
    cache = _sparse_cache(4, 16)
    padded = torch.zeros(4, 16 * TOKEN_BYTES + 64, dtype=torch.uint8)
    padded[:, : 16 * TOKEN_BYTES] = cache.reshape(4, -1)
    view = padded[:, : 16 * TOKEN_BYTES].view(4, 16, 1, TOKEN_BYTES)
    indices = random_indices((2, 1, 64), 64)
    q = torch.randn(2, 1, 16, 576).bfloat16()
    out, lse = openmla.sparse_decode(q, view, indices)
    out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale())
    assert_attention_close(out, lse, out_ref, lse_ref)


@pytest.mark.parametrize("h_q, topk, d_qk, with_length, with_sink", [
    (16, 40, 576, False, False),
    (8, 100, 512, True, True),
])
def test_sparse_prefill_matches_torch(h_q, topk, d_qk, with_length, with_sink):
    s_q, s_kv = 5, 300
    q = torch.randn(s_q, h_q, d_qk).bfloat16()
    kv = torch.randn(s_kv, 1, d_qk).bfloat16()
    indices = random_indices((s_q, 1, topk), s_kv, invalid_fraction=0.3)
    indices[4] = -1  # an empty row
    topk_length = torch.tensor([topk, 3, 0, topk // 2, topk], dtype=torch.int32) if with_length else None
    sink = torch.randn(h_q) if with_sink else None
    scale = d_qk ** -0.5
    out, max_logits, lse = openmla.sparse_prefill(q, kv, indices, softmax_scale=scale, topk_length=topk_length,
                                                  attn_sink=sink)
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, kv, indices, scale, topk_length, sink)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)
    assert torch.isneginf(max_logits[4]).all() and torch.isposinf(lse[4]).all() and torch.all(out[4] == 0)


@pytest.mark.parametrize("h_q, page_size", [(16, 64), (24, 5)])
def test_sparse_prefill_fp8_cache_matches_torch(h_q, page_size):
    """FP8-cache mode: kv is the 656-byte paged cache (the reference dequantises it)."""
    s_q, pages, topk = 4, 6, 96
    q = torch.randn(s_q, h_q, 576).bfloat16()
    cache = _sparse_cache(pages, page_size)
    indices = random_indices((s_q, 1, topk), pages * page_size, invalid_fraction=0.3)
    topk_length = torch.tensor([topk, 7, 0, 50], dtype=torch.int32)
    sink = torch.randn(h_q)
    out, max_logits, lse = openmla.sparse_prefill(q, cache, indices, topk_length=topk_length, attn_sink=sink)
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, cache, indices, 576 ** -0.5, topk_length, sink)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)
    assert torch.isposinf(lse[2]).all() and torch.all(out[2] == 0)  # topk_length 0


def test_sparse_prefill_fp8_cache_messages():
    q = torch.randn(2, 16, 576).bfloat16()
    cache = _sparse_cache(2, 64)
    indices = random_indices((2, 1, 64), 128)
    with pytest.raises(ValueError, match=r"^sparse_prefill: argument 'kv' has the wrong shape"):
        openmla.sparse_prefill(q, cache[..., :600], indices)
    with pytest.raises(NotImplementedError, match=r"^sparse_prefill: argument 'q' \(d_qk\) is not supported"):
        openmla.sparse_prefill(q[..., :512].contiguous(), cache, indices)


def test_sparse_validation_messages():
    q = torch.randn(1, 1, 16, 576).bfloat16()
    cache = _sparse_cache(2, 64)
    indices = random_indices((1, 1, 128), 128)
    with pytest.raises(NotImplementedError, match=r"^sparse_decode: argument 'q' has an unsupported dtype"):
        openmla.sparse_decode(q.half(), cache, indices)
    with pytest.raises(NotImplementedError, match=r"^sparse_decode: argument 'kv_cache' is not a byte tensor"):
        openmla.sparse_decode(q, cache.float(), indices)
    with pytest.raises(ValueError, match=r"^sparse_decode: argument 'kv_cache' has the wrong shape"):
        openmla.sparse_decode(q, cache[..., :600], indices)
    with pytest.raises(NotImplementedError, match=r"^sparse_decode: argument 'indices' \(topk\) must be a multiple of 64"):
        openmla.sparse_decode(q, cache, indices[..., :100])
    with pytest.raises(ValueError, match=r"^sparse_decode: argument 'attn_sink' has the wrong shape"):
        openmla.sparse_decode(q, cache, indices, attn_sink=torch.zeros(8))
    with pytest.raises(NotImplementedError, match=r"^sparse_prefill: argument 'kv' has more than one KV head"):
        openmla.sparse_prefill(q[0], torch.zeros(10, 2, 576, dtype=torch.bfloat16), indices)
