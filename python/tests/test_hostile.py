"""Hostile input through the Python API (issue 28): every bad argument raises an
exception whose message names it ("<entry>: argument '<name>' ..."), never an
IndexError from inside the package, a crash, garbage or a silent default.
"""

import pytest
import torch

import openmla
from openmla import flash_mla, flash_mla_tensor_metadata
from mla_reference import (TOKEN_BYTES, assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs,
                           quantize_sparse_tokens, random_indices)


def _dense(lengths=(10, 20), **kw):
    return make_dense_inputs(list(lengths), h_q=16, page_size=16, **kw)


def _sparse(b=2, s_q=1, h_q=16, topk=64, num_pages=2, page_size=64):
    rows = torch.randn(num_pages * page_size, 576)
    cache = quantize_sparse_tokens(rows).reshape(num_pages, page_size, 1, TOKEN_BYTES)
    return torch.randn(b, s_q, h_q, 576).bfloat16(), cache, random_indices((b, s_q, topk), num_pages * page_size)


def _prefill(s_q=3, h_q=16, topk=32, s_kv=50):
    return (torch.randn(s_q, h_q, 576).bfloat16(), torch.randn(s_kv, 1, 576).bfloat16(),
            random_indices((s_q, 1, topk), s_kv))


# ---------------------------------------------------------------------------
# Workspace and metadata are checked on the CPU too
# ---------------------------------------------------------------------------
def test_cpu_workspace_too_small_raises():
    x = _dense()
    with pytest.raises(ValueError, match=r"dense_decode: argument 'workspace_bytes' is smaller than the plan's"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, workspace=torch.empty(1, dtype=torch.uint8))


def test_cpu_workspace_wrong_dtype_or_device_raises():
    x = _dense()
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table)
    with pytest.raises(NotImplementedError, match=r"dense_decode: argument 'workspace' has an unsupported dtype"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens,
                             workspace=torch.empty(plan.workspace_bytes, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"dense_decode: argument 'workspace' is on an unsupported device"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens,
                             workspace=torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="meta"))


def test_cpu_workspace_of_the_right_plan_runs():
    x = _dense()
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table, max_parts=1)
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan,
                                    workspace=plan.alloc_workspace())
    assert_attention_close(out, lse, *dense_decode_ref(x.q, x.kv_cache, x.block_table, x.seqlens, default_scale()))


def test_one_element_metadata_raises():
    # Metadata tensors are the older form's (openmla.flash_mla takes get_mla_metadata()'s object); their
    # contents are not read, but one that get_mla_metadata() did not make is named, not run with.
    x = _dense()
    _, num_splits = flash_mla_tensor_metadata.get_mla_metadata(x.seqlens, 16, 1)
    with pytest.raises(ValueError, match=r"flash_mla_with_kvcache: argument 'tile_scheduler_metadata' has the "
                                         r"wrong shape: got tile_scheduler_metadata.shape = \[1\]"):
        flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                                         torch.empty(1, dtype=torch.int32), num_splits)
    with pytest.raises(TypeError, match=r"flash_mla_with_kvcache: argument 'tile_scheduler_metadata' has an "
                                        r"unsupported type: got Tensor"):
        flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                         torch.empty(1, dtype=torch.int32))


# ---------------------------------------------------------------------------
# Tensors on a device that is neither cpu nor cuda
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["kv_cache", "block_table", "seqlens", "q_scale"])
def test_dense_meta_tensor_raises(name):
    x = _dense(dtype=torch.float8_e4m3fn)
    args = dict(q=x.q, kv_cache=x.kv_cache, block_table=x.block_table, seqlens=x.seqlens,
                q_scale=torch.ones(1), kv_scale=torch.ones(1))
    args[name] = args[name].to("meta")
    with pytest.raises(ValueError, match=rf"dense_decode: argument '{name}' is on an unsupported device"):
        openmla.dense_decode(args.pop("q"), args.pop("kv_cache"), args.pop("block_table"), args.pop("seqlens"),
                             **args)


@pytest.mark.parametrize("name", ["kv_cache", "indices", "attn_sink", "topk_length"])
def test_sparse_meta_tensor_raises(name):
    q, cache, indices = _sparse()
    args = dict(q=q, kv_cache=cache, indices=indices, attn_sink=torch.zeros(16),
                topk_length=torch.full((2,), 64, dtype=torch.int32))
    args[name] = args[name].to("meta")
    with pytest.raises(ValueError, match=rf"sparse_decode: argument '{name}' is on an unsupported device"):
        openmla.sparse_decode(args.pop("q"), args.pop("kv_cache"), args.pop("indices"), **args)


def test_meta_tensor_after_a_cpu_call_of_the_same_shapes_raises():
    # The eager path keys prepared calls by device: a meta tensor (index -1, as the CPU's) must not reuse the
    # CPU call, whose reference would read its missing data.
    x = _dense()
    openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens)
    with pytest.raises(ValueError, match=r"dense_decode: argument 'kv_cache' is on an unsupported device"):
        openmla.dense_decode(x.q, x.kv_cache.to("meta"), x.block_table, x.seqlens)
    q, cache, indices = _sparse()
    openmla.sparse_decode(q, cache, indices)
    with pytest.raises(ValueError, match=r"sparse_decode: argument 'indices' is on an unsupported device"):
        openmla.sparse_decode(q, cache, indices.to("meta"))


def test_cpu_workspace_checked_on_every_call():
    # A prepared call is reused for every workspace of the same dtype and layout; the size is checked each time.
    x = _dense()
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table)
    openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, workspace=plan.alloc_workspace())
    with pytest.raises(ValueError, match=r"dense_decode: argument 'workspace_bytes' is smaller than the plan's"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens,
                             workspace=torch.empty(plan.workspace_bytes - 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"dense_decode: argument 'workspace' is not contiguous"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens,
                             workspace=torch.empty(2 * plan.workspace_bytes, dtype=torch.uint8)[::2])
    q, cache, indices = _sparse()
    sparse = openmla.SparsePlan.for_tensors(q, cache, indices)
    with pytest.raises(NotImplementedError, match=r"sparse_decode: argument 'workspace' has an unsupported dtype"):
        openmla.sparse_decode(q, cache, indices, workspace=torch.empty(sparse.workspace_bytes, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"sparse_decode: argument 'workspace_bytes' is smaller than the plan's"):
        openmla.sparse_decode(q, cache, indices, workspace=torch.empty(8, dtype=torch.uint8))


def test_non_tensor_arguments_are_named():
    x = _dense()
    with pytest.raises(TypeError, match=r"dense_decode: argument 'seqlens' must be a tensor: got seqlens of type list"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, [10, 20])
    with pytest.raises(TypeError, match=r"flash_mla_with_kvcache: argument 'cache_seqlens' must be a tensor"):
        flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, 7, 512, flash_mla.get_mla_metadata()[0])
    q, cache, indices = _sparse()
    with pytest.raises(TypeError, match=r"sparse_decode: argument 'attn_sink' must be a tensor: got attn_sink of "
                                        r"type float, expected a torch.Tensor or None"):
        openmla.sparse_decode(q, cache, indices, attn_sink=0.5)


@pytest.mark.parametrize("name", ["kv", "indices", "attn_sink"])
def test_prefill_meta_tensor_raises(name):
    q, kv, indices = _prefill()
    args = dict(q=q, kv=kv, indices=indices, attn_sink=torch.zeros(16))
    args[name] = args[name].to("meta")
    with pytest.raises(ValueError, match=rf"sparse_prefill: argument '{name}' is on an unsupported device"):
        openmla.sparse_prefill(args.pop("q"), args.pop("kv"), args.pop("indices"), **args)


# ---------------------------------------------------------------------------
# Scales
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0])
@pytest.mark.parametrize("name", ["q_scale", "kv_scale"])
def test_fp8_scale_must_be_finite_positive(name, bad):
    x = _dense(dtype=torch.float8_e4m3fn)
    scales = dict(q_scale=torch.ones(1), kv_scale=torch.ones(1))
    scales[name] = torch.tensor([bad])
    with pytest.raises(ValueError, match=rf"argument '{name}' must be finite and positive"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, **scales)


@pytest.mark.parametrize("name", ["q_scale", "kv_scale"])
def test_scale_with_bf16_inputs_raises(name):
    x = _dense()
    with pytest.raises(ValueError, match=rf"dense_decode: argument '{name}' is given for non-fp8 inputs"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, **{name: torch.ones(1)})


def test_flash_mla_fp8_flag_with_bf16_cache_raises():
    x = _dense()
    # FlashMLA's form has no dense FP8 (no descale arguments): the flag is refused, naming the cache's dtype.
    with pytest.raises(NotImplementedError, match=r"flash_mla_with_kvcache: argument 'is_fp8_kvcache' is not "
                                                  r"supported without indices: got is_fp8_kvcache = True with "
                                                  r"k_cache.dtype = torch.bfloat16"):
        flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512,
                                         flash_mla.get_mla_metadata()[0], is_fp8_kvcache=True)
    # The tensor-metadata form has dense FP8, so the flag with a BF16 cache would be ignored: named instead.
    metadata, num_splits = flash_mla_tensor_metadata.get_mla_metadata(x.seqlens, 16, 1)
    with pytest.raises(ValueError, match=r"flash_mla_with_kvcache: argument 'is_fp8_kvcache' does not match "
                                         r"k_cache"):
        flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, metadata,
                                                         num_splits, is_fp8_kvcache=True)


@pytest.mark.parametrize("module", [flash_mla, flash_mla_tensor_metadata])
def test_flash_mla_sparse_fwd_needs_sm_scale(module):
    q, kv, indices = _prefill()
    with pytest.raises(ValueError, match=r"flash_mla_sparse_fwd: argument 'sm_scale' is missing"):
        module.flash_mla_sparse_fwd(q, kv, indices, None)
    with pytest.raises(TypeError, match=r"flash_mla_sparse_fwd: argument 'sm_scale' must be a number"):
        module.flash_mla_sparse_fwd(q, kv, indices, "abc")


# ---------------------------------------------------------------------------
# Errors that name the caller's argument
# ---------------------------------------------------------------------------
def test_rank0_and_rank2_q_name_q():
    x = _dense()
    for q in (torch.tensor(1.0).bfloat16(), x.q[0, 0]):
        with pytest.raises(ValueError, match=r"dense_decode: argument 'q' has the wrong number of dimensions"):
            openmla.dense_decode(q, x.kv_cache, x.block_table, x.seqlens)


def test_d_qk_zero_names_d_qk():
    x = _dense()
    q = torch.empty(2, 1, 16, 0, dtype=torch.bfloat16)
    with pytest.raises((ValueError, NotImplementedError), match=r"dense_decode: argument '(d_qk|kv_cache)'"):
        openmla.dense_decode(q, x.kv_cache, x.block_table, x.seqlens)


@pytest.mark.parametrize("d_v", [-1, 0, 256, 2**40])
def test_bad_d_v_names_d_v(d_v):
    x = _dense()
    with pytest.raises((ValueError, NotImplementedError), match=r"dense_decode: argument 'd_v'"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, d_v=d_v)


def test_non_number_softmax_scale_names_it():
    x = _dense()
    with pytest.raises(TypeError, match=r"dense_decode: argument 'softmax_scale' must be a number"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, softmax_scale="abc")


def test_plan_sizes_beyond_int32_name_the_size():
    with pytest.raises(NotImplementedError, match=r"plan_dense_decode: argument 'batch' is too large"):
        openmla.DensePlan(batch=2**31, h_q=16, num_pages=1, max_pages_per_seq=1, device="cpu")
    with pytest.raises(TypeError, match=r"plan_sparse_decode: argument 'topk' must be an int"):
        openmla.SparsePlan(batch=1, h_q=16, topk="64", num_pages=1, device="cpu")


def test_huge_expanded_batch_is_refused_before_allocating():
    x = _dense([5])
    q = x.q.expand(2**25, -1, -1, -1)
    table = x.block_table.expand(2**25, -1)
    seqlens = x.seqlens.expand(2**25)
    # The C++ check names the size; the message names the caller's argument it comes from.
    with pytest.raises(NotImplementedError,
                       match=r"dense_decode: argument 'q' \(batch\) is outside the supported range"):
        openmla.dense_decode(q, x.kv_cache, table, seqlens)


def test_wrong_plan_object_names_plan():
    x = _dense()
    sparse = openmla.SparsePlan(batch=2, h_q=16, topk=64, num_pages=1, device="cpu")
    for plan in (sparse, "nope"):
        with pytest.raises(TypeError, match=r"dense_decode: argument 'plan' must be a DensePlan"):
            openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan)
    q, cache, indices = _sparse()
    with pytest.raises(TypeError, match=r"sparse_decode: argument 'plan' must be a SparsePlan"):
        openmla.sparse_decode(q, cache, indices, plan=openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table))


def test_sparse_plan_topk_mismatch_shows_the_field():
    q, cache, indices = _sparse(topk=128)
    plan = openmla.SparsePlan(batch=2, h_q=16, topk=64, num_pages=2, device="cpu")
    with pytest.raises(ValueError, match=r"got plan.lengths.default_length = 64, expected "
                                         r"plan.lengths.default_length = 128"):
        openmla.sparse_decode(q, cache, indices, plan=plan)


def test_prefill_zero_heads_names_h_q():
    q, kv, indices = _prefill()
    with pytest.raises(ValueError, match=r"sparse_prefill: argument 'q' \(h_q\) is too small"):
        openmla.sparse_prefill(q[:, :0], kv, indices)


def test_get_mla_metadata_bad_arguments_name_them():
    # The tensor form reads its arguments (openmla.flash_mla's get_mla_metadata ignores them, as FlashMLA's does).
    get_mla_metadata = flash_mla_tensor_metadata.get_mla_metadata
    with pytest.raises(ValueError, match=r"get_mla_metadata: argument 'cache_seqlens' has the wrong number"):
        get_mla_metadata(torch.tensor(5, dtype=torch.int32), 16, 1)
    seqlens = torch.tensor([5, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"get_mla_metadata: argument 'num_heads_k' is too small"):
        get_mla_metadata(seqlens, 16, 0)
    for rows in (0, -3):
        with pytest.raises(ValueError, match=r"get_mla_metadata: argument 'num_q_tokens_per_head_k' is too small"):
            get_mla_metadata(seqlens, rows, 1)
    with pytest.raises(ValueError, match=r"get_mla_metadata: argument 'num_heads_q' is too small"):
        get_mla_metadata(seqlens, 16, 1, num_heads_q=0, topk=64)
    with pytest.raises(TypeError, match=r"get_mla_metadata_dense_fp8: argument 'num_heads_k' must be an int"):
        flash_mla_tensor_metadata.get_mla_metadata_dense_fp8(seqlens, 16, "1")


@pytest.mark.parametrize("rank", [0, 2])
def test_flash_mla_rank2_q_or_cache_names_it(rank):
    x = _dense()
    low = (lambda t: t.flatten()[0]) if rank == 0 else (lambda t: t[0, 0])
    metadata, num_splits = flash_mla_tensor_metadata.get_mla_metadata(x.seqlens, 16, 1)
    calls = [lambda q, k: flash_mla.flash_mla_with_kvcache(q, k, x.block_table, x.seqlens, 512,
                                                           flash_mla.get_mla_metadata()[0]),
             lambda q, k: flash_mla_tensor_metadata.flash_mla_with_kvcache(q, k, x.block_table, x.seqlens, 512,
                                                                           metadata, num_splits)]
    for call in calls:
        with pytest.raises(ValueError,
                           match=r"flash_mla_with_kvcache: argument 'q' has the wrong number of dimensions"):
            call(low(x.q), x.kv_cache)
        with pytest.raises(ValueError,
                           match=r"flash_mla_with_kvcache: argument 'k_cache' has the wrong number of dimensions"):
            call(x.q, low(x.kv_cache))


# ---------------------------------------------------------------------------
# Valid layouts that are not row-major run and match
# ---------------------------------------------------------------------------
def test_permuted_q_and_kv_layouts_match_contiguous():
    x = make_dense_inputs([10, 40], s_q=3, h_q=16, h_kv=2, page_size=16)
    want = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens)
    q = x.q.transpose(1, 2).contiguous().transpose(1, 2)
    kv = x.kv_cache.transpose(1, 2).contiguous().transpose(1, 2)
    got = openmla.dense_decode(q, kv, x.block_table, x.seqlens)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_transposed_prefill_q_matches_contiguous():
    q, kv, indices = _prefill()
    want = openmla.sparse_prefill(q, kv, indices)
    got = openmla.sparse_prefill(q.transpose(0, 1).contiguous().transpose(0, 1), kv, indices)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.gpu
def test_permuted_layouts_on_gpu_match_cpu():
    # The kernels take one stride per dimension (q by pointer arithmetic, KV by a TMA map).
    x = make_dense_inputs([10, 300], s_q=2, h_q=16, h_kv=2, page_size=64)
    q = x.q.transpose(1, 2).contiguous().transpose(1, 2)
    kv = x.kv_cache.transpose(1, 2).contiguous().transpose(1, 2)
    want = openmla.dense_decode(q, kv, x.block_table, x.seqlens)
    got = openmla.dense_decode(q.cuda(), kv.cuda(), x.block_table.cuda(), x.seqlens.cuda())
    assert_attention_close(got[0], got[1], want[0], want[1])
    sq, cache, indices = _sparse(h_q=64)
    want = openmla.sparse_decode(sq, cache, indices)
    sq = sq.transpose(1, 2).contiguous().transpose(1, 2)
    got = openmla.sparse_decode(sq.cuda(), cache.cuda(), indices.cuda())
    assert_attention_close(got[0], got[1], want[0], want[1])


@pytest.mark.gpu
def test_tampered_or_foreign_plan_refused_on_gpu():
    x = make_dense_inputs([10, 300], h_q=16, page_size=64, device="cuda")
    sparse = openmla.SparsePlan(batch=2, h_q=16, topk=64, num_pages=1, device="cuda")
    with pytest.raises(TypeError, match=r"dense_decode: argument 'plan' must be a DensePlan"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=sparse)
