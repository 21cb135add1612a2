"""The FlashMLA drop-ins against the peers' signatures, recorded here as data (CPU tensors: the C++ reference).

openmla.flash_mla                  <- deepseek-ai/FlashMLA 9241ae3, flash_mla/flash_mla_interface.py
openmla.flash_mla_tensor_metadata  <- vllm-project/FlashMLA 46d64a8 / SGLang's sgl_kernel (metadata as tensors),
                                      plus vLLM's dense FP8 names (vllm/v1/attention/ops/flashmla.py)

Each entry: (name, default) in positional order; REQUIRED marks no default,
VAR_POSITIONAL / VAR_KEYWORD mark *args / **kwargs.
"""

import dataclasses
import inspect
import re

import pytest
import torch

import openmla
from openmla import flash_mla, flash_mla_tensor_metadata
from mla_reference import (TOKEN_BYTES, assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs,
                           quantize_sparse_tokens, random_indices, sparse_decode_ref, sparse_prefill_ref)

REQUIRED = inspect.Parameter.empty
VAR_POSITIONAL = "*"
VAR_KEYWORD = "**"

_VARLEN_TAIL = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False), ("deterministic", False),
                ("is_varlen", True)]

FLASH_MLA_9241AE3 = {
    "get_mla_metadata": [("args", VAR_POSITIONAL), ("kwargs", VAR_KEYWORD)],
    "flash_mla_with_kvcache": [
        ("q", REQUIRED), ("k_cache", REQUIRED), ("block_table", REQUIRED), ("cache_seqlens", REQUIRED),
        ("head_dim_v", REQUIRED), ("tile_scheduler_metadata", REQUIRED), ("num_splits", None),
        ("softmax_scale", None), ("causal", False), ("is_fp8_kvcache", False), ("indices", None),
        ("attn_sink", None), ("extra_k_cache", None), ("extra_indices_in_kvcache", None), ("topk_length", None),
        ("extra_topk_length", None)],
    "flash_mla_sparse_fwd": [("q", REQUIRED), ("kv", REQUIRED), ("indices", REQUIRED), ("sm_scale", REQUIRED),
                             ("d_v", 512), ("attn_sink", None), ("topk_length", None)],
    "flash_attn_varlen_func": [("q", REQUIRED), ("k", REQUIRED), ("v", REQUIRED), ("cu_seqlens_qo", REQUIRED),
                               ("cu_seqlens_kv", REQUIRED), ("max_seqlen_qo", REQUIRED),
                               ("max_seqlen_kv", REQUIRED)] + _VARLEN_TAIL,
    "flash_attn_varlen_qkvpacked_func": [("qkv", REQUIRED), ("cu_seqlens", REQUIRED), ("max_seqlen", REQUIRED),
                                         ("head_dim_qk", REQUIRED)] + _VARLEN_TAIL,
    "flash_attn_varlen_kvpacked_func": [("q", REQUIRED), ("kv", REQUIRED), ("cu_seqlens_qo", REQUIRED),
                                        ("cu_seqlens_kv", REQUIRED), ("max_seqlen_qo", REQUIRED),
                                        ("max_seqlen_kv", REQUIRED), ("head_dim_qk", REQUIRED)] + _VARLEN_TAIL,
}
FLASH_MLA_9241AE3_ALL = ["get_mla_metadata", "flash_mla_with_kvcache", "flash_attn_varlen_func",
                         "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func",
                         "flash_mla_sparse_fwd"]
SCHED_META_FIELDS = [("have_initialized", False), ("config", None), ("tile_scheduler_metadata", None),
                     ("num_splits", None)]
SCHED_META_CONFIG_FIELDS = ["b", "s_q", "h_q", "page_block_size", "h_k", "causal", "is_fp8_kvcache", "topk",
                            "extra_page_block_size", "extra_topk"]

_METADATA_HEAD = [("cache_seqlens", REQUIRED), ("num_q_tokens_per_head_k", REQUIRED), ("num_heads_k", REQUIRED)]
_KVCACHE_HEAD = [("q", REQUIRED), ("k_cache", REQUIRED), ("block_table", REQUIRED), ("cache_seqlens", REQUIRED),
                 ("head_dim_v", REQUIRED), ("tile_scheduler_metadata", REQUIRED), ("num_splits", REQUIRED),
                 ("softmax_scale", None), ("causal", False), ("descale_q", None), ("descale_k", None)]
TENSOR_METADATA = {
    "get_mla_metadata": _METADATA_HEAD + [("num_heads_q", None), ("is_fp8_kvcache", False), ("topk", None)],
    "get_mla_metadata_dense_fp8": _METADATA_HEAD,            # vLLM
    "get_mla_decoding_metadata_dense_fp8": _METADATA_HEAD,   # SGLang
    "flash_mla_with_kvcache": _KVCACHE_HEAD + [("is_fp8_kvcache", False), ("indices", None)],
    "flash_mla_with_kvcache_fp8": _KVCACHE_HEAD,             # vLLM
    "flash_mla_sparse_fwd": [("q", REQUIRED), ("kv", REQUIRED), ("indices", REQUIRED), ("sm_scale", REQUIRED),
                             ("d_v", 512)],
}


def _recorded(fn) -> list:
    result = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            result.append((p.name, VAR_POSITIONAL))
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            result.append((p.name, VAR_KEYWORD))
        else:
            assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, (fn.__name__, p.name, p.kind)
            result.append((p.name, p.default))
    return result


@pytest.mark.parametrize("module, recorded", [(flash_mla, FLASH_MLA_9241AE3),
                                              (flash_mla_tensor_metadata, TENSOR_METADATA)],
                         ids=["flash_mla", "flash_mla_tensor_metadata"])
def test_signatures_match_the_peers(module, recorded):
    for name, parameters in recorded.items():
        assert name in module.__all__, name
        assert _recorded(getattr(module, name)) == parameters, name


def test_flash_mla_has_vllms_dense_fp8_names():
    # The drop-in: vLLM's dense FP8 entries importable from openmla.flash_mla, vLLM's signatures.
    for name in ("get_mla_metadata_dense_fp8", "flash_mla_with_kvcache_fp8"):
        assert name in flash_mla.__all__, name
        assert _recorded(getattr(flash_mla, name)) == TENSOR_METADATA[name], name


def test_flash_mla_exports_and_dataclass():
    assert set(FLASH_MLA_9241AE3_ALL) <= set(flash_mla.__all__)
    assert isinstance(flash_mla.__version__, str)
    meta_fields = [(f.name, f.default) for f in dataclasses.fields(flash_mla.FlashMLASchedMeta)]
    assert meta_fields == SCHED_META_FIELDS
    config_fields = [f.name for f in dataclasses.fields(flash_mla.FlashMLASchedMeta.Config)]
    assert config_fields == SCHED_META_CONFIG_FIELDS
    for args, kwargs in (((), {}), ((torch.zeros(3, dtype=torch.int32), 16, 1), {}), ((), {"num_heads_q": 64})):
        meta, none = flash_mla.get_mla_metadata(*args, **kwargs)
        assert type(meta) is flash_mla.FlashMLASchedMeta and none is None and not meta.have_initialized


# ---------------------------------------------------------------------------
# openmla.flash_mla with FlashMLA's full positional order
# ---------------------------------------------------------------------------
def test_flash_mla_dense_positional_and_lazy_metadata():
    x = make_dense_inputs([0, 20, 70], s_q=2, h_q=16, page_size=64, capacity=[10, 64, 70])
    scale = default_scale()
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, None, scale,
                                                True, False, None, None, None, None, None, None)
    assert meta.have_initialized
    assert meta.config == flash_mla.FlashMLASchedMeta.Config(3, 2, 16, 64, 1, True, False, None, None, None)
    assert out.shape == (3, 2, 16, 512) and lse.shape == (3, 16, 2) and lse.dtype == torch.float32
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, scale, causal=True)
    assert_attention_close(out, lse, out_ref, lse_ref)
    # Another layer, new lengths, the same object (OpenMLA rebuilds the schedule per call).
    lens = torch.tensor([5, 64, 1], dtype=torch.int32)
    out, lse = flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, lens, 512, meta, None, scale, True)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, lens, scale, causal=True)
    assert_attention_close(out, lse, out_ref, lse_ref)
    with pytest.raises(ValueError, match=r"^flash_mla_with_kvcache: argument 'tile_scheduler_metadata' was filled by "
                                         r"a call with other arguments: got causal = False, expected causal = True"):
        flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, None, scale, False)


def _sparse_inputs(b=2, s_q=2, h_q=64, topk=128, pages=4):
    cache = quantize_sparse_tokens(torch.randn(pages * 64, 576)).reshape(pages, 64, 1, TOKEN_BYTES)
    q = torch.randn(b, s_q, h_q, 576).bfloat16()
    indices = random_indices((b, s_q, topk), pages * 64)
    return q, cache, indices


def test_flash_mla_sparse_positional():
    q, cache, indices = _sparse_inputs()
    lengths = torch.tensor([100, 64], dtype=torch.int32)
    sink = torch.randn(64)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, None, default_scale(), False, True,
                                                indices, sink, None, None, lengths, None)
    assert meta.config.topk == 128
    out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale(), lengths, sink)
    assert_attention_close(out, lse, out_ref, lse_ref)


@pytest.mark.parametrize("position, name", [(12, "extra_k_cache"), (13, "extra_indices_in_kvcache"),
                                            (15, "extra_topk_length")])
def test_flash_mla_extra_cache_not_implemented(position, name):
    q, cache, indices = _sparse_inputs()
    args = [q, cache, None, None, 512, flash_mla.get_mla_metadata()[0], None, None, False, True, indices, None,
            None, None, None, None]
    args[position] = torch.zeros(1)
    with pytest.raises(NotImplementedError, match=rf"^flash_mla_with_kvcache: argument '{name}' is not supported"):
        flash_mla.flash_mla_with_kvcache(*args)


def test_flash_mla_argument_rules():
    x = make_dense_inputs([3], h_q=16, page_size=64)
    meta = flash_mla.get_mla_metadata()[0]
    call = flash_mla.flash_mla_with_kvcache
    with pytest.raises(ValueError, match=r"argument 'attn_sink' needs indices"):
        call(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, None, attn_sink=torch.zeros(16))
    with pytest.raises(ValueError, match=r"argument 'cache_seqlens' is missing"):
        call(x.q, x.kv_cache, x.block_table, None, 512, meta)
    with pytest.raises(TypeError, match=r"argument 'tile_scheduler_metadata' has an unsupported type"):
        call(x.q, x.kv_cache, x.block_table, x.seqlens, 512, None)
    with pytest.raises(ValueError, match=r"argument 'num_splits' must be None"):
        call(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, torch.zeros(2, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match=r"argument 'is_fp8_kvcache' is not supported without indices"):
        call(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, None, None, False, True)
    # After the object is filled, a dense-only rule still holds on every call.
    call(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta)
    with pytest.raises(ValueError, match=r"argument 'topk_length' needs indices"):
        call(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, topk_length=torch.ones(1, dtype=torch.int32))
    q, cache, indices = _sparse_inputs()
    with pytest.raises(ValueError, match=r"argument 'is_fp8_kvcache' must be True with indices"):
        call(q, cache, None, None, 512, flash_mla.get_mla_metadata()[0], indices=indices)
    with pytest.raises(ValueError, match=r"argument 'causal' must be False with indices"):
        call(q, cache, None, None, 512, flash_mla.get_mla_metadata()[0], None, None, True, True, indices)


def test_flash_mla_sparse_fwd_positional():
    q = torch.randn(4, 16, 576).bfloat16()
    kv = torch.randn(200, 1, 576).bfloat16()
    indices = random_indices((4, 1, 64), 200)
    sink = torch.randn(16)
    lengths = torch.tensor([64, 3, 0, 17], dtype=torch.int32)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, indices, 0.04, 512, sink, lengths)
    assert out.shape == (4, 16, 512) and max_logits.shape == (4, 16) and lse.shape == (4, 16)
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, kv, indices, 0.04, lengths, sink)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)


@pytest.mark.parametrize("name", ["flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
                                  "flash_attn_varlen_kvpacked_func"])
def test_flash_attn_varlen_not_implemented(name):
    args = [None] * sum(1 for _, default in FLASH_MLA_9241AE3[name] if default is REQUIRED)
    with pytest.raises(NotImplementedError, match=rf"^{name}: dense MHA prefill is not implemented"):
        getattr(flash_mla, name)(*args)


# ---------------------------------------------------------------------------
# openmla.flash_mla_tensor_metadata with the older positional order
# ---------------------------------------------------------------------------
def test_tensor_metadata_shapes():
    lens = torch.tensor([9, 100, 3], dtype=torch.int32)
    for args in ((lens, 2 * 128, 1), (lens, 64, 1, 64), (lens, 64, 1, 64, True, 2048), (lens, 16, 1, None, True)):
        tile_md, num_splits = flash_mla_tensor_metadata.get_mla_metadata(*args)
        assert tile_md.dtype == torch.int32 and tile_md.dim() == 2 and tile_md.shape[1] == 8
        assert tile_md.shape[0] >= 1 and num_splits.dtype == torch.int32 and num_splits.shape == (4,)
    for fn in (flash_mla_tensor_metadata.get_mla_metadata_dense_fp8,
               flash_mla_tensor_metadata.get_mla_decoding_metadata_dense_fp8):
        tile_md, num_splits = fn(lens, 128, 1)
        assert tile_md.shape[1] == 8 and num_splits.shape == (4,)
    with pytest.raises(ValueError, match=r"^get_mla_metadata: argument 'num_heads_q' is missing"):
        flash_mla_tensor_metadata.get_mla_metadata(lens, 64, 1, None, True, 2048)
    # FlashMLA's count of parts, the same for every batch: SGLang copies each step's tensor into one buffer.
    buffer, _ = flash_mla_tensor_metadata.get_mla_metadata(torch.ones(256, dtype=torch.int32), 128, 1)
    for batch in (1, 7, 256):
        tile_md, num_splits = flash_mla_tensor_metadata.get_mla_metadata(torch.ones(batch, dtype=torch.int32), 128, 1)
        buffer.copy_(tile_md)
        assert num_splits.shape == (batch + 1,)
    assert buffer.shape == (132 // 2, 8)  # 132 SMs (an H200 for CPU tensors), 128 rows = two 64-row groups


def test_tensor_metadata_dense_positional():
    x = make_dense_inputs([9, 100], s_q=2, h_q=16, page_size=64)
    md = flash_mla_tensor_metadata.get_mla_metadata(x.seqlens, 2 * 16, 1)
    scale = default_scale()
    out, lse = flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                                                *md, scale, True, None, None, False, None)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, scale, causal=True)
    assert_attention_close(out, lse, out_ref, lse_ref)
    # A copy of the metadata (a CUDA-graph buffer) works as well.
    buffers = tuple(t.clone() for t in md)
    out, lse = flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                                                *buffers, scale, True)
    assert_attention_close(out, lse, out_ref, lse_ref)
    with pytest.raises(TypeError, match=r"^flash_mla_with_kvcache: argument 'tile_scheduler_metadata' has an "
                                        r"unsupported type: got FlashMLASchedMeta"):
        flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                                         flash_mla.get_mla_metadata()[0], None)


def test_tensor_metadata_sparse_positional():
    q, cache, indices = _sparse_inputs()
    md = flash_mla_tensor_metadata.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 2 * 64, 1, 64, True, 128)
    out, lse = flash_mla_tensor_metadata.flash_mla_with_kvcache(q, cache, None, None, 512, *md, default_scale(),
                                                                False, None, None, True, indices)
    out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale())
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_tensor_metadata_dense_fp8_positional():
    x = make_dense_inputs([30, 65], h_q=16, page_size=64, dtype=torch.float8_e4m3fn)
    dq, dk = torch.tensor([0.03]), torch.tensor([0.07])
    md = flash_mla_tensor_metadata.get_mla_metadata_dense_fp8(x.seqlens, 16, 1)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), q_scale=dq,
                                        kv_scale=dk)
    out, lse = flash_mla_tensor_metadata.flash_mla_with_kvcache_fp8(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                                                    *md, default_scale(), False, dq, dk)
    assert out.dtype == torch.bfloat16
    assert_attention_close(out, lse, out_ref, lse_ref)
    out, lse = flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache.view(torch.uint8), x.block_table,
                                                                x.seqlens, 512, *md, None, False, dq, dk, True)
    assert_attention_close(out, lse, out_ref, lse_ref)
    with pytest.raises(ValueError, match=r"^flash_mla_with_kvcache_fp8: argument 'descale_k' is missing"):
        flash_mla_tensor_metadata.flash_mla_with_kvcache_fp8(x.q, x.kv_cache, x.block_table, x.seqlens, 512, *md,
                                                             None, False, dq)


def test_tensor_metadata_sparse_prefill_positional():
    q = torch.randn(4, 16, 576).bfloat16()
    kv = torch.randn(200, 1, 576).bfloat16()
    indices = random_indices((4, 1, 64), 200)
    out, max_logits, lse = flash_mla_tensor_metadata.flash_mla_sparse_fwd(q, kv, indices, 0.04, 512)
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, kv, indices, 0.04)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)


# ---------------------------------------------------------------------------
# Messages name the public entry and the caller's argument, with one prefix
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mutate, pattern", [
    (lambda a: a.update(q=a["q"].float(), k_cache=a["k_cache"].float()),
     r"^flash_mla_with_kvcache: argument 'q' is not supported: got q.dtype = fp32"),
    (lambda a: a.update(k_cache=a["k_cache"].half()),
     r"^flash_mla_with_kvcache: argument 'k_cache' must match q.dtype: got k_cache.dtype = fp16"),
    (lambda a: a.update(cache_seqlens=a["cache_seqlens"].long()),
     r"^flash_mla_with_kvcache: argument 'cache_seqlens' has an unsupported dtype: got cache_seqlens.dtype = int64"),
    (lambda a: a.update(head_dim_v=256), r"^flash_mla_with_kvcache: argument 'head_dim_v' is not supported"),
    (lambda a: a.update(softmax_scale=float("nan")), r"^flash_mla_with_kvcache: argument 'softmax_scale' must be"),
])
def test_messages_name_the_callers_arguments(mutate, pattern):
    x = make_dense_inputs([3, 5], h_q=16, page_size=64)
    args = dict(q=x.q, k_cache=x.kv_cache, block_table=x.block_table, cache_seqlens=x.seqlens, head_dim_v=512,
                tile_scheduler_metadata=flash_mla.get_mla_metadata()[0], softmax_scale=None)
    mutate(args)
    with pytest.raises((ValueError, NotImplementedError)) as caught:
        flash_mla.flash_mla_with_kvcache(**args)
    message = str(caught.value)
    assert re.search(pattern, message), message
    assert "reference_" not in message and "_run:" not in message and message.count(":") >= 1
    assert not re.match(r"^\w+: \w+: ", message), message  # one prefix


def test_tensor_metadata_messages():
    x = make_dense_inputs([3], h_q=16, page_size=64, dtype=torch.float8_e4m3fn)
    md = flash_mla_tensor_metadata.get_mla_metadata_dense_fp8(x.seqlens, 16, 1)
    with pytest.raises(ValueError, match=r"^flash_mla_with_kvcache_fp8: argument 'descale_q' must not be null"):
        flash_mla_tensor_metadata.flash_mla_with_kvcache_fp8(x.q, x.kv_cache, x.block_table, x.seqlens, 512, *md)


def test_no_cuda_device_message():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match=r"^DensePlan: argument 'device' is a CUDA device but there is no CUDA "
                                           r"device: got cuda, expected .*CPU tensors run the C\+\+ reference$"):
        openmla.DensePlan(batch=1, h_q=16, num_pages=1, max_pages_per_seq=1, device="cuda")
    with pytest.raises(RuntimeError, match=r"^device_info: argument 'device' is a CUDA device but there is no CUDA"):
        openmla.device_info(0)


def test_caller_made_scheduler_metadata_caps_parts():
    # vLLM's batch-invariant mode puts a [1, 8] tile_scheduler_metadata on the object: one SM part, no split.
    x = make_dense_inputs([30, 70], h_q=16, page_size=64)
    meta, _ = flash_mla.get_mla_metadata()
    meta.tile_scheduler_metadata = torch.zeros(1, 8, dtype=torch.int32)
    meta.num_splits = torch.zeros(3, dtype=torch.int32)
    assert flash_mla._caller_parts(meta.tile_scheduler_metadata) == 1
    out, lse = flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, None, None, True)
    assert_attention_close(out, lse, *dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(),
                                                       causal=True))
    assert meta.tile_scheduler_metadata.shape == (1, 8)  # left as the caller set it


def test_torch_compile_fullgraph_both_forms():
    x = make_dense_inputs([30, 70], h_q=16, page_size=64)
    expected = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), causal=True)
    meta, _ = flash_mla.get_mla_metadata()

    def lazy(q, kv, table, lens):
        return flash_mla.flash_mla_with_kvcache(q * 1, kv, table, lens, 512, meta, None, None, True)

    def tensors(q, kv, table, lens, tile_md, num_splits):
        return flash_mla_tensor_metadata.flash_mla_with_kvcache(q * 1, kv, table, lens, 512, tile_md, num_splits,
                                                                None, True)

    assert_attention_close(*torch.compile(lazy, fullgraph=True)(x.q, x.kv_cache, x.block_table, x.seqlens),
                           *expected)
    assert meta.have_initialized
    md = flash_mla_tensor_metadata.get_mla_metadata(x.seqlens, 16, 1)
    assert_attention_close(*torch.compile(tensors, fullgraph=True)(x.q, x.kv_cache, x.block_table, x.seqlens, *md),
                           *expected)
