"""The extension's surface: plans, TensorRef, and Status -> exception mapping with the C++ messages."""

import pytest
import torch

import openmla
from openmla import _C
from mla_reference import make_dense_inputs


def test_module_surface():
    for name in ("TensorRef", "DeviceInfo", "PlanOptions", "DenseDecodeShape", "SparseDecodeShape", "DecodePlan",
                 "DType", "query_device_info", "plan_dense_decode", "plan_sparse_decode", "dense_decode",
                 "sparse_decode", "sparse_prefill", "dense_decode_shape", "sparse_decode_shape",
                 "check_plan_matches"):
        assert hasattr(_C, name), name
    assert (_C.HEAD_DIM_QK, _C.HEAD_DIM_V, _C.SPARSE_FP8_TOKEN_BYTES) == (576, 512, 656)
    assert openmla.__all__ and all(hasattr(openmla, n) for n in openmla.__all__)


def test_binding_does_not_link_torch():
    # One build for every torch version: the extension must not depend on libtorch / libc10.
    import pathlib
    blob = pathlib.Path(_C.__file__).read_bytes()
    for lib in (b"libtorch", b"libc10"):
        assert lib not in blob


def test_tensor_ref_describes_tensor():
    t = torch.empty(3, 5, dtype=torch.bfloat16)[:, 1:]
    r = openmla._tensors.ref(t)
    assert (r.data, r.dtype, r.itemsize, list(r.sizes), list(r.strides), r.device) == (
        t.data_ptr(), "bfloat16", 2, [3, 4], [5, 1], _C.CPU_DEVICE)


def test_dense_plan_never_zero_parts():
    # FlashMLA's FP8 path computed 0 parts for h_q = 128, s_q >= 67 on 132 SMs (a field crash, reproduced on the H200).
    for s_q in (1, 2, 64, 67, 128, 512):
        plan = openmla.DensePlan(batch=4, s_q=s_q, h_q=128, num_pages=256, max_pages_per_seq=64,
                                 device=openmla.DeviceInfo())
        assert plan.num_parts >= 1
        # Past 66 q-groups (s_q > 33 here) parts hold whole requests and no partial slots.
        assert plan.num_slots == (0 if plan.num_parts == 1 or s_q > 33 else 2 * (plan.num_parts - 1))
        regions = plan.workspace_regions
        assert set(regions) == {"parts", "combine", "item_prefix", "part_bounds", "part_slots", "partial_lse",
                                "partial_o"}
        assert all(offset % 256 == 0 for offset, _ in regions.values())
        assert plan.workspace_bytes >= max(offset + size for offset, size in regions.values())
    # 134 q-groups on 132 SMs: three parts of whole requests (1, 2, 1) finish in five rounds of one
    # request instead of two rounds of four; nothing is split, so no accumulator.
    long_query = openmla.DensePlan(batch=4, s_q=67, h_q=128, num_pages=1, max_pages_per_seq=1,
                                   device=openmla.DeviceInfo())
    assert (long_query.num_parts, long_query.num_slots) == (3, 0)
    assert long_query.workspace_regions["partial_o"][1] == 0


def test_workspace_bounded_by_sms_not_batch():
    # Split accumulators are bounded by the part count: 2 * 132 * 64 * 513 * 4 bytes plus scheduler scratch.
    bound = 2 * 132 * 64 * 513 * 4
    small = openmla.SparsePlan(batch=1, h_q=128, topk=2048, num_pages=1, device=openmla.DeviceInfo())
    large = openmla.SparsePlan(batch=12000, h_q=128, topk=2048, num_pages=1, device=openmla.DeviceInfo())
    assert large.workspace_bytes - small.workspace_bytes < 12000 * 8 + 4096  # scheduler scratch only
    assert large.workspace_bytes < bound + 12000 * 8 + 4096


def test_plan_options_and_device_override():
    info = openmla.DeviceInfo()
    info.num_sms = 32
    plan = openmla.DensePlan(batch=8, h_q=16, num_pages=8, max_pages_per_seq=1, device=info)
    assert plan.num_parts == 32 and plan.num_sms == 32
    assert openmla.DensePlan(batch=8, h_q=16, num_pages=8, max_pages_per_seq=1, device=info,
                             max_parts=1).num_parts == 1
    assert openmla.DensePlan(batch=8, h_q=16, num_pages=8, max_pages_per_seq=1, device=info,
                             max_parts=4).num_parts == 4


def test_alloc_workspace_cpu():
    plan = openmla.DensePlan(batch=2, h_q=16, num_pages=4, max_pages_per_seq=2, device="cpu")
    ws = plan.alloc_workspace()
    assert ws.dtype == torch.uint8 and ws.numel() == plan.workspace_bytes and ws.device.type == "cpu"


# ---------------------------------------------------------------------------
# Status -> exception, with the C++ message
# ---------------------------------------------------------------------------
def test_invalid_argument_is_value_error():
    with pytest.raises(ValueError, match=r"^plan_dense_decode: argument 'batch' is out of range: got batch = 0"):
        openmla.DensePlan(batch=0, h_q=16, num_pages=4, max_pages_per_seq=2, device="cpu")
    with pytest.raises(ValueError, match=r"plan_dense_decode: argument 'h_q' must be a multiple of h_kv"):
        openmla.DensePlan(batch=1, h_q=12, h_kv=8, num_pages=4, max_pages_per_seq=2, device="cpu")


def test_not_supported_is_not_implemented_error():
    with pytest.raises(NotImplementedError, match=r"plan_dense_decode: argument 'h_q' is outside the supported range"):
        openmla.DensePlan(batch=1, h_q=256, num_pages=4, max_pages_per_seq=2, device="cpu")
    with pytest.raises(NotImplementedError, match=r"plan_sparse_decode: argument 'topk' must be a multiple of 64"):
        openmla.SparsePlan(batch=1, h_q=64, topk=100, num_pages=4, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error path without a GPU")
def test_cuda_error_is_runtime_error():
    with pytest.raises(RuntimeError, match=r"query_device_info: cudaGetDeviceProperties\(0\) failed"):
        _C.query_device_info(0)


def test_plan_mismatch_names_plan():
    x = make_dense_inputs([10, 20], h_q=16, page_size=16)
    plan = openmla.DensePlan(batch=3, h_q=16, page_size=16, num_pages=x.kv_cache.shape[0],
                             max_pages_per_seq=x.block_table.shape[1], device="cpu")
    with pytest.raises(ValueError, match=r"dense_decode: argument 'plan' was not made by plan_dense_decode for these shapes: got plan.num_items = 3"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan)
    ok = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table)
    openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=ok)


def _misaligned(t):
    """A copy of `t` starting one element past a 16-byte boundary."""
    buffer = torch.empty(t.numel() + 8, dtype=t.dtype)
    view = buffer[1:1 + t.numel()].view(t.shape)
    view.copy_(t)
    return view


@pytest.mark.parametrize("mutate, error, pattern", [
    (lambda x: x.update(seqlens=x["seqlens"].long()), NotImplementedError,
     r"^dense_decode: argument 'seqlens' has an unsupported dtype: got seqlens.dtype = int64, expected int32$"),
    (lambda x: x.update(block_table=x["block_table"][:1]), ValueError,
     r"^dense_decode: argument 'block_table' has the wrong shape: got block_table.shape = \[1, 2\]"),
    (lambda x: x.update(q=x["q"][0]), ValueError,
     r"^dense_decode: argument 'q' has the wrong number of dimensions: got q.shape = \[1, 16, 576\], "
     r"expected 4 dimensions \[batch, s_q, h_q, d_qk\]$"),
    (lambda x: x.update(q=x["q"].double()), NotImplementedError,
     r"^dense_decode: argument 'q' has an unsupported dtype: got q.dtype = float64"),
    (lambda x: x.update(q=x["q"].float(), kv_cache=x["kv_cache"].float()), NotImplementedError,
     r"^dense_decode: argument 'q' is not supported: got q.dtype = fp32"),
    (lambda x: x.update(kv_cache=x["kv_cache"].half()), NotImplementedError,
     r"^dense_decode: argument 'kv_cache' must match q.dtype: got kv_cache.dtype = fp16"),
    (lambda x: x.update(q=x["q"].transpose(2, 3).contiguous().transpose(2, 3)), ValueError,
     r"^dense_decode: argument 'q' has a non-contiguous last dimension: got q.stride\(-1\) = 16, expected 1$"),
    (lambda x: x.update(q=_misaligned(x["q"])), ValueError,
     r"^dense_decode: argument 'q' must be 16-byte aligned: got q = 0x"),
    (lambda x: x.update(kv_cache=x["kv_cache"][..., :512]), ValueError,
     r"^dense_decode: argument 'kv_cache' has the wrong shape"),
    (lambda x: x.update(softmax_scale=float("nan")), ValueError,
     r"^dense_decode: argument 'softmax_scale' must be finite and positive"),
    (lambda x: x.update(q=x["q"][:, :, :0]), ValueError,
     r"^dense_decode: argument 'q' \(h_q\) is out of range: got h_q = 0"),
])
def test_dense_validation_messages(mutate, error, pattern):
    x = make_dense_inputs([10, 20], h_q=16, page_size=16)
    args = dict(q=x.q, kv_cache=x.kv_cache, block_table=x.block_table, seqlens=x.seqlens, softmax_scale=0.05)
    mutate(args)
    with pytest.raises(error, match=pattern):
        openmla.dense_decode(args.pop("q"), args.pop("kv_cache"), args.pop("block_table"), args.pop("seqlens"),
                             **args)


def test_fp8_needs_scales():
    x = make_dense_inputs([10], h_q=16, page_size=16, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"^dense_decode: argument 'q_scale' must not be null"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens)


def test_mixed_devices_are_named():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device to mix devices")
    x = make_dense_inputs([10], h_q=16, page_size=16)
    with pytest.raises(ValueError, match=r"dense_decode: argument 'seqlens' is on another device"):
        openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens.cuda())


def test_prefill_shape_plans_both_modes():
    # _C.SparsePrefillShape carries FP8-cache mode: that plan names the sparse decode kernels.
    shape = _C.SparsePrefillShape()
    shape.s_q, shape.h_q, shape.topk = 4096, 64, 2048
    shape.s_kv = 32768
    bf16 = _C.plan_sparse_prefill(shape, _C.DeviceInfo(), _C.PlanOptions())
    shape.fp8_kv_cache, shape.page_size, shape.num_pages = True, 64, 512
    fp8 = _C.plan_sparse_prefill(shape, _C.DeviceInfo(), _C.PlanOptions())
    assert (bf16.num_items, fp8.num_items) == (4096, 4096)
    assert (bf16.kernel, fp8.kernel) == ("sparse_prefill_alternate_blocks", "sparse_heads_on_m")
    shape.num_pages = 0  # the FP8 cache's pages must be given
    with pytest.raises(ValueError, match="num_pages"):
        _C.plan_sparse_prefill(shape, _C.DeviceInfo(), _C.PlanOptions())


def test_schedule_in_kernel_from_a_few_items_where_its_scratch_fits():
    # Dense decode from 1 item up, sparse decode from 1 (3 at h_q = 64) build the split-KV schedule in the
    # attention kernel (no schedule kernel) while the partition's scratch fits 32 KB; fewer items and big
    # batches keep the schedule kernel (docs/architecture.md, "The schedule inside the attention kernel").
    cpu = openmla.DeviceInfo()
    dense = [openmla.DensePlan(batch=b, s_q=1, h_q=128, num_pages=256, max_pages_per_seq=256, device=cpu)
             for b in (1, 2, 3, 128, 32768)]  # 16384 tokens: too long for a cluster split
    assert [p.schedule_in_kernel for p in dense] == [True, True, True, True, False]
    sparse = [openmla.SparsePlan(batch=b, s_q=s_q, h_q=h_q, topk=2048, num_pages=64, device=cpu)
              for b, s_q, h_q in ((1, 1, 64), (1, 2, 64), (3, 1, 64), (64, 1, 64), (1, 1, 128), (1, 1, 16))]
    assert [p.schedule_in_kernel for p in sparse] == [False, False, True, True, True, True]
    # The plan's placement is kept and travels with every run (re-planned from the plan's values).
    forced = openmla.DensePlan(batch=1, s_q=2, h_q=128, num_pages=64, max_pages_per_seq=64, device=cpu,
                               schedule_placement=2)
    assert forced.schedule_in_kernel and forced.schedule_placement == 2
    assert forced.options.schedule_placement == 2
    kernel = openmla.SparsePlan(batch=64, h_q=64, topk=2048, num_pages=64, device=cpu, schedule_placement=1)
    assert not kernel.schedule_in_kernel and "schedule_in_kernel=False" in repr(kernel)
    numpy = pytest.importorskip("numpy")  # integer-likes are taken, as for the sizes
    assert openmla.SparsePlan(batch=64, h_q=64, topk=2048, num_pages=64, device=cpu,
                              schedule_placement=numpy.int64(2)).schedule_placement == 2
    for bad in (3, -1, True, 1.0, "2"):
        with pytest.raises(ValueError, match=r"^DensePlan: argument 'schedule_placement' is not a placement: got "):
            openmla.DensePlan(batch=1, h_q=128, num_pages=64, max_pages_per_seq=64, device=cpu,
                              schedule_placement=bad)
    options = _C.PlanOptions()
    assert options.schedule_placement == 0
    options.schedule_placement = 2
    assert options.schedule_placement == 2
