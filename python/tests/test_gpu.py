"""GPU tests (skipped without CUDA): kernels vs a torch float32 reference, CUDA graphs, torch.compile.

Calls without a GPU kernel must raise NotImplementedError carrying the C++
message; each such test says so explicitly and must be turned into a reference
comparison when its kernel lands (it fails once the call stops raising).
"""

import pytest
import torch

import openmla
from openmla import flash_mla_tensor_metadata
from openmla.flash_mla import flash_mla_sparse_fwd, flash_mla_with_kvcache, get_mla_metadata
from mla_reference import (TOKEN_BYTES, assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs,
                           quantize_sparse_tokens, random_indices, sparse_decode_ref, sparse_prefill_ref)

pytestmark = pytest.mark.gpu


def _expect_not_implemented(call, pattern):
    """No GPU kernel runs this call: it must raise NotImplementedError with the C++ message `pattern`."""
    with pytest.raises(NotImplementedError, match=pattern):
        call()


# ---------------------------------------------------------------------------
# Dense decode
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("lengths, s_q, h_q, h_kv, page_size, causal, dtype", [
    ([1, 64, 200, 1000], 1, 128, 1, 64, False, torch.bfloat16),   # DeepSeek-V3 decode
    ([0, 17, 4096], 2, 64, 1, 64, True, torch.bfloat16),          # MTP, empty request, long
    ([300, 5, 999], 4, 16, 1, 16, True, torch.float16),           # TP8 heads, page 16, fp16
    ([128, 257, 3], 1, 8, 1, 128, False, torch.bfloat16),         # TP16 heads, page 128
    ([70, 1, 0, 33], 3, 32, 1, 32, True, torch.bfloat16),         # page 32, short rows
    ([900, 901, 60, 1500], 67, 128, 1, 64, True, torch.bfloat16), # the s_q = 67 shape (one part)
    ([100, 40], 1, 24, 1, 64, False, torch.bfloat16),             # irregular head count
])
def test_dense_decode_vs_torch(lengths, s_q, h_q, h_kv, page_size, causal, dtype):
    x = make_dense_inputs(lengths, s_q=s_q, h_q=h_q, h_kv=h_kv, page_size=page_size, dtype=dtype, device="cuda")
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, causal=causal)
    torch.cuda.synchronize()
    assert out.device.type == "cuda" and out.dtype == dtype and lse.shape == (len(lengths), h_q, s_q)
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), causal)
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_dense_decode_page_size_one_is_named():
    x = make_dense_inputs([10, 3], h_q=16, page_size=1, device="cuda")
    _expect_not_implemented(lambda: openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens),
                            r"^dense_decode: argument 'kv_cache' \(page_size\) has no GPU kernel: got page_size = 1,")


@pytest.mark.parametrize("options", [dict(max_parts=1), dict(min_parts=48), dict()])
def test_dense_split_and_no_split(options):
    x = make_dense_inputs([3000, 50, 700, 1, 0], h_q=16, page_size=64, device="cuda")
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table, **options)
    if options.get("min_parts"):
        assert plan.num_slots > 0
    if options.get("max_parts") == 1:
        assert plan.num_slots == 0
    workspace = plan.alloc_workspace()
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan, workspace=workspace)
    torch.cuda.synchronize()
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale())
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_schedule_placement_travels_and_gives_the_same_bits():
    # The plan's schedule_placement reaches the run (eager and through torch.ops; test_ops.py checks the
    # re-plan's argument on the CPU): a schedule kernel and the attention kernel build the same schedule,
    # so out and lse are bitwise equal. One request: the automatic placement is the attention kernel there
    # (one item, ScheduleBuild::kBuildOneItem), so the forced schedule kernel differs from it.
    x = make_dense_inputs([3000], h_q=16, s_q=2, page_size=64, device="cuda")
    plans = [openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table, schedule_placement=p) for p in (0, 1, 2)]
    assert [p.schedule_in_kernel for p in plans] == [True, False, True]
    results = [openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=p, workspace=p.alloc_workspace(),
                                    causal=True) for p in plans[1:]]
    results.append(torch.ops.openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, None, None, None,
                                                  default_scale(), True, 512, 0, 0, 0, False, 1))
    torch.cuda.synchronize()
    for out, lse in results[1:]:
        assert torch.equal(out, results[0][0]) and torch.equal(lse, results[0][1])
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), True)
    assert_attention_close(*results[0], out_ref, lse_ref)

    b, s_q, h_q, topk, pages = 1, 1, 64, 256, 8  # one item: the automatic placement is the schedule kernel
    cache = quantize_sparse_tokens(torch.randn(pages * 64, 576)).reshape(pages, 64, 1, TOKEN_BYTES).cuda()
    q = torch.randn(b, s_q, h_q, 576, device="cuda").bfloat16()
    indices = random_indices((b, s_q, topk), pages * 64).cuda()
    plans = [openmla.SparsePlan.for_tensors(q, cache, indices, schedule_placement=p) for p in (0, 1, 2)]
    assert [p.schedule_in_kernel for p in plans] == [False, False, True]
    results = [openmla.sparse_decode(q, cache, indices, plan=p) for p in plans[1:]]
    results.append(torch.ops.openmla.sparse_decode(q, cache, indices, None, None, None, default_scale(), 512, 0, 0, 0,
                                                   False, 2))
    torch.cuda.synchronize()
    for out, lse in results[1:]:
        assert torch.equal(out, results[0][0]) and torch.equal(lse, results[0][1])
    out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale())
    assert_attention_close(*results[0], out_ref, lse_ref)


def test_dense_decode_on_side_stream():
    x = make_dense_inputs([500, 20], s_q=2, h_q=64, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, causal=True, stream=stream)
    stream.synchronize()
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), True)
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_workspace_too_small_names_workspace():
    x = make_dense_inputs([500, 20], h_q=64, device="cuda")
    with pytest.raises(ValueError, match=r"^dense_decode: argument 'workspace' "):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens,
                             workspace=torch.empty(16, dtype=torch.uint8, device="cuda"))


# ---------------------------------------------------------------------------
# CUDA graphs: capture once, replay with other lengths
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("preallocated", [True, False])
def test_cuda_graph_replay_with_new_lengths(preallocated):
    capacity = [2000, 300, 64, 1000, 129]
    x = make_dense_inputs([1500, 10, 64, 999, 0], capacity=capacity, s_q=2, h_q=64, device="cuda")
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table)
    workspace = plan.alloc_workspace() if preallocated else None
    seqlens = x.seqlens.clone()

    def step():
        return openmla.dense_decode(x.q, x.kv_cache, x.block_table, seqlens, plan=plan, workspace=workspace,
                                    causal=True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = step()
    for lengths in ([1500, 10, 64, 999, 0], [2000, 0, 1, 17, 129], [5, 300, 63, 1000, 64], [0, 0, 0, 0, 0]):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, torch.tensor(lengths), default_scale(),
                                            True)
        assert_attention_close(out, lse, out_ref, lse_ref)


def test_cuda_graph_flash_mla_metadata():
    capacity = [700, 64, 2048]
    x = make_dense_inputs([700, 64, 2048], capacity=capacity, s_q=1, h_q=128, device="cuda")
    meta, _ = get_mla_metadata()
    seqlens = x.seqlens.clone()
    flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, seqlens, 512, meta, None)  # fills meta (eager)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, seqlens, 512, meta, None)
    for lengths in ([1, 2, 3], [700, 0, 2048], [350, 64, 1025]):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, torch.tensor(lengths), default_scale())
        assert_attention_close(out, lse, out_ref, lse_ref)


def test_flash_mla_old_style_metadata_gpu():
    x = make_dense_inputs([100, 1000, 3], s_q=2, h_q=128, device="cuda")
    tile_md, num_splits = flash_mla_tensor_metadata.get_mla_metadata(x.seqlens, 2 * 128, 1)
    assert tile_md.device.type == "cuda" and tile_md.shape[1] == 8 and num_splits.shape == (4,)
    out, lse = flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                                                tile_md, num_splits, causal=True)
    torch.cuda.synchronize()
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), True)
    assert_attention_close(out, lse, out_ref, lse_ref)


# ---------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_gpu(mode):
    capacity = [900, 64, 3000]
    x = make_dense_inputs([900, 64, 3000], capacity=capacity, s_q=2, h_q=128, device="cuda")
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table)
    workspace = plan.alloc_workspace()

    def step(q, kv, table, lens, ws):
        out, lse = openmla.dense_decode(q * 1.0, kv, table, lens, plan=plan, workspace=ws, causal=True)
        return out, lse

    compiled = torch.compile(step, fullgraph=True, mode=mode)
    for lengths in ([900, 64, 3000], [1, 0, 2999], [450, 63, 1024]):
        lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        out, lse = compiled(x.q, x.kv_cache, x.block_table, lens, workspace)
        torch.cuda.synchronize()
        out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, lens, default_scale(), True)
        assert_attention_close(out, lse, out_ref, lse_ref)


# ---------------------------------------------------------------------------
# Sparse decode against the reference; families without a GPU kernel yet: a clear NotImplementedError
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("lengths, s_q, h_q, page_size, causal", [
    ([30, 200], 1, 64, 64, False),
    ([0, 1, 700, 129], 2, 128, 16, True),      # empty and one-token requests, small pages
    ([300, 90], 67, 128, 64, True),             # the vLLM fork's failing shape (s_q >= 67 at h_q = 128)
])
def test_dense_fp8_gpu(lengths, s_q, h_q, page_size, causal):
    x = make_dense_inputs(lengths, s_q=s_q, h_q=h_q, page_size=page_size, dtype=torch.float8_e4m3fn, device="cuda")
    q_scale, kv_scale = torch.tensor([0.02], device="cuda"), torch.tensor([0.05], device="cuda")
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, causal=causal, q_scale=q_scale,
                                    kv_scale=kv_scale)
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16
    out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale(), causal,
                                        q_scale=q_scale, kv_scale=kv_scale)
    assert_attention_close(out, lse, out_ref, lse_ref)


def test_dense_fp8_vllm_names_graph_replay_new_lengths_and_scales():
    # vLLM's dense FP8 entry from openmla.flash_mla, captured once; each replay reads new lengths and descales.
    from openmla.flash_mla import flash_mla_with_kvcache_fp8, get_mla_metadata_dense_fp8
    x = make_dense_inputs([500, 64, 1000], capacity=[1000, 64, 1000], s_q=2, h_q=16, dtype=torch.float8_e4m3fn,
                          device="cuda")
    seqlens = x.seqlens.clone()
    descale_q, descale_k = torch.tensor([0.02], device="cuda"), torch.tensor([0.05], device="cuda")
    md = get_mla_metadata_dense_fp8(seqlens, 2 * 16, 1)
    flash_mla_with_kvcache_fp8(x.q, x.kv_cache, x.block_table, seqlens, 512, *md, causal=True,
                               descale_q=descale_q, descale_k=descale_k)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flash_mla_with_kvcache_fp8(x.q, x.kv_cache, x.block_table, seqlens, 512, *md, causal=True,
                                              descale_q=descale_q, descale_k=descale_k)
    for lengths, dq, dk in (([1, 2, 3], 0.02, 0.05), ([999, 0, 64], 2.0 ** -8, 2.0 ** 8), ([400, 63, 1000], 1.0, 0.5)):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        descale_q.fill_(dq)
        descale_k.fill_(dk)
        graph.replay()
        torch.cuda.synchronize()
        out_ref, lse_ref = dense_decode_ref(x.q, x.kv_cache, x.block_table, torch.tensor(lengths), default_scale(),
                                            True, q_scale=descale_q, kv_scale=descale_k)
        assert_attention_close(out, lse, out_ref, lse_ref)


def test_sparse_decode_gpu():
    b, s_q, h_q, topk, pages = 2, 2, 64, 256, 8
    cache = quantize_sparse_tokens(torch.randn(pages * 64, 576)).reshape(pages, 64, 1, TOKEN_BYTES).cuda()
    q = torch.randn(b, s_q, h_q, 576, device="cuda").bfloat16()
    indices = random_indices((b, s_q, topk), pages * 64).cuda()
    lengths = torch.tensor([200, 64], dtype=torch.int32, device="cuda")
    result = flash_mla_with_kvcache(q, cache, None, None, 512, get_mla_metadata()[0], is_fp8_kvcache=True,
                                    indices=indices, topk_length=lengths)
    torch.cuda.synchronize()
    out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale(), lengths)
    assert_attention_close(*result, out_ref, lse_ref)


@pytest.mark.parametrize("h_q, page_size, extras", [(128, 64, True), (16, 64, False), (64, 37, True)])
def test_sparse_prefill_fp8_cache_gpu(h_q, page_size, extras):
    """FP8-cache mode: kv is sparse decode's 656-byte paged cache, read in place."""
    s_q, topk, pages = 23, 256, 40
    gen = torch.Generator().manual_seed(h_q + page_size)
    q = torch.randn(s_q, h_q, 576, generator=gen).bfloat16().cuda()
    cache = quantize_sparse_tokens(torch.randn(pages * page_size, 576, generator=gen))
    cache = cache.view(pages, page_size, 1, TOKEN_BYTES).cuda()
    indices = random_indices((s_q, 1, topk), pages * page_size, seed=h_q).cuda()
    topk_length = torch.randint(0, topk + 1, (s_q,), generator=gen, dtype=torch.int32).cuda() if extras else None
    sink = (torch.rand(h_q, generator=gen) * 4).cuda() if extras else None
    scale = default_scale()
    out, max_logits, lse = flash_mla_sparse_fwd(q, cache, indices, scale, attn_sink=sink, topk_length=topk_length)
    torch.cuda.synchronize()
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, cache, indices, scale, topk_length, sink)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)


@pytest.mark.parametrize("s_q, h_q, d_qk, topk, s_kv, extras", [
    (8, 64, 576, 128, 500, False),     # FlashMLA's shapes
    (37, 128, 576, 384, 3000, True),   # topk_length and sink
    (5, 16, 512, 192, 100, True),      # narrow heads (padded tile), d_qk = 512
    (1, 128, 576, 2048, 20000, False), # one token split over parts: the combine takes max_logits
])
def test_sparse_prefill_gpu(s_q, h_q, d_qk, topk, s_kv, extras):
    gen = torch.Generator().manual_seed(s_q * 1000 + h_q)
    q = torch.randn(s_q, h_q, d_qk, generator=gen).bfloat16().cuda()
    kv = torch.randn(s_kv, 1, d_qk, generator=gen).bfloat16().cuda()
    indices = random_indices((s_q, 1, topk), s_kv, seed=s_q).cuda()
    topk_length = torch.randint(0, topk + 1, (s_q,), generator=gen, dtype=torch.int32).cuda() if extras else None
    sink = (torch.rand(h_q, generator=gen) * 4).cuda() if extras else None
    scale = default_scale(d_qk)
    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, indices, scale, attn_sink=sink, topk_length=topk_length)
    torch.cuda.synchronize()
    out_ref, max_ref, lse_ref = sparse_prefill_ref(q, kv, indices, scale, topk_length, sink)
    assert_attention_close(out, lse, out_ref, lse_ref, max_logits=max_logits, max_logits_ref=max_ref)
