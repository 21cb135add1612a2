"""Plans: shapes + device -> part count and workspace size (never lengths).

A plan is what the C++ planner (plan_dense_decode / plan_sparse_decode)
returns. It does not depend on sequence lengths, so one plan and one workspace
serve every call, and every CUDA-graph replay, with the same shapes.
"""

from __future__ import annotations

import functools
import operator
from typing import Optional, Union

import torch

from openmla import _C
from openmla._tensors import device_index, ref

DeviceLike = Union[None, int, str, torch.device, "_C.DeviceInfo"]

_DTYPES = {
    torch.bfloat16: _C.DType.bf16,
    torch.float16: _C.DType.fp16,
    torch.float8_e4m3fn: _C.DType.fp8_e4m3,
}


def _require_cuda(entry: str, device) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{entry}: argument 'device' is a CUDA device but there is no CUDA device: got {device}, "
                           "expected a CUDA device visible to torch (torch.cuda.is_available() is False); "
                           "CPU tensors run the C++ reference")


def _as_torch_device(device: DeviceLike, entry: str = "device_info") -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if isinstance(device, int):
        _require_cuda(entry, f"cuda:{device}")
        return torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cuda":
        _require_cuda(entry, device)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def _plan_device(device: DeviceLike) -> torch.device:
    """Where alloc_workspace() allocates: the given device (the current CUDA one for a DeviceInfo)."""
    return _as_torch_device(None if isinstance(device, _C.DeviceInfo) else device)


@functools.lru_cache(maxsize=None)
def _queried(index: int) -> tuple:
    info = _C.query_device_info(index)
    return info.num_sms, info.max_smem_per_block, info.cc_major, info.cc_minor


def device_info(device: DeviceLike = None, num_sms: int = 0) -> "_C.DeviceInfo":
    """What the planner needs to know about `device`: SM count, shared memory, compute capability.

    CUDA devices are queried once (cached). For the CPU the default describes an
    H200 (132 SMs): the CPU backend ignores the plan, but its size stays meaningful.
    `num_sms` > 0 overrides the SM count (e.g. to leave SMs to other work).
    """
    if isinstance(device, _C.DeviceInfo):
        info = device
    else:
        info = _C.DeviceInfo()
        torch_device = _as_torch_device(device)
        if torch_device.type == "cuda":
            info.num_sms, info.max_smem_per_block, info.cc_major, info.cc_minor = _queried(
                device_index(torch_device))
    if num_sms > 0:
        copy = _C.DeviceInfo()
        copy.num_sms, copy.max_smem_per_block = num_sms, info.max_smem_per_block
        copy.cc_major, copy.cc_minor = info.cc_major, info.cc_minor
        info = copy
    return info


# PlanOptions.schedule_placement: where the split-KV schedule is built (include/openmla/plan.h).
SCHEDULE_PLACEMENTS = {0: "automatic", 1: "schedule kernel", 2: "attention kernel"}


def plan_options(max_parts: int = 0, min_parts: int = 0, batch_invariant: bool = False,
                 schedule_placement: int = 0, entry: str = "PlanOptions") -> "_C.PlanOptions":
    options = _C.PlanOptions()
    options.max_parts, options.min_parts = max_parts, min_parts
    options.batch_invariant = bool(batch_invariant)
    try:
        placement = None if isinstance(schedule_placement, bool) else operator.index(schedule_placement)
    except TypeError:
        placement = None
    if placement not in SCHEDULE_PLACEMENTS:
        raise ValueError(f"{entry}: argument 'schedule_placement' is not a placement: got "
                         f"schedule_placement = {schedule_placement!r}, expected one of "
                         f"{', '.join(f'{k} ({v})' for k, v in SCHEDULE_PLACEMENTS.items())}")
    options.schedule_placement = placement
    return options


# typed: a placement of True must not find the entry cached for 1 (plan_options rejects bools).
@functools.lru_cache(maxsize=256, typed=True)
def run_config(device: torch.device, num_sms: int, max_parts: int, min_parts: int,
               batch_invariant: bool = False, schedule_placement: int = 0, entry: str = "PlanOptions") -> tuple:
    """(DeviceInfo, PlanOptions) for a run of `entry` on `device`; cached, so callers must not modify them."""
    return (device_info(device, num_sms),
            plan_options(max_parts, min_parts, batch_invariant, schedule_placement, entry))


def _dtype_enum(dtype: torch.dtype) -> "_C.DType":
    if dtype not in _DTYPES:
        raise NotImplementedError(
            f"plan_dense_decode: argument 'dtype' is not supported: got dtype = {dtype}, "
            "expected one of {torch.bfloat16, torch.float16, torch.float8_e4m3fn}")
    return _DTYPES[dtype]


def check_plan_type(entry: str, plan, cls) -> None:
    """A run's plan argument is a plan of its own family."""
    if not isinstance(plan, cls):
        raise TypeError(f"{entry}: argument 'plan' must be a {cls.__name__}: got {type(plan).__name__}, expected a "
                        f"{cls.__name__} (openmla.{cls.__name__}(...) or {cls.__name__}.for_tensors(...)) or None")


def _set_sizes(entry: str, shape, **sizes) -> None:
    """Copies int sizes into a C++ shape struct, naming one that is not an int or does not fit int32."""
    for name, value in sizes.items():
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{entry}: argument '{name}' must be an int: got {name} = {value!r} "
                            f"({type(value).__name__}), expected an int") from None
        if value > 2**31 - 1:
            raise NotImplementedError(f"{entry}: argument '{name}' is too large: got {name} = {value}, expected "
                                      f"{name} <= 2147483647")
        if value < -2**31:
            raise ValueError(f"{entry}: argument '{name}' is too small: got {name} = {value}, expected {name} >= 1")
        setattr(shape, name, value)


class _Plan:
    """Common part of DensePlan and SparsePlan."""

    _entry = ""

    def __init__(self, plan: "_C.DecodePlan", info: "_C.DeviceInfo", options: "_C.PlanOptions",
                 device: torch.device):
        self._plan = plan
        self.device_info = info
        self.device = device
        # Plain ints, so torch.compile can read them as constants.
        self.num_sms = info.num_sms
        self.max_parts = options.max_parts
        self.min_parts = options.min_parts
        # Batch-invariant mode (docs/batch_invariance.md): each request's out and
        # LSE do not depend on the rest of the batch.
        self.batch_invariant = bool(options.batch_invariant)
        self.schedule_placement = int(options.schedule_placement)

    # The family's planner and tensor-shape reader (set by each subclass).
    _plan_fn = None   # _C.plan_*_decode(shape, DeviceInfo, PlanOptions)
    _shape_fn = None  # _C.*_decode_shape(q, cache, table_or_indices, d_v)

    def _init_from_shape(self, shape, device: DeviceLike, max_parts: int, min_parts: int,
                         batch_invariant: bool = False, schedule_placement: int = 0) -> None:
        if not isinstance(device, _C.DeviceInfo):
            _as_torch_device(device, type(self).__name__)  # names a missing CUDA device for this entry
        info = device_info(device)
        options = plan_options(max_parts, min_parts, batch_invariant, schedule_placement, type(self).__name__)
        self.shape = shape
        _Plan.__init__(self, type(self)._plan_fn(shape, info, options), info, options, _plan_device(device))

    @classmethod
    def for_tensors(cls, q: torch.Tensor, kv_cache: torch.Tensor, index: torch.Tensor, /, *,
                    d_v: int = _C.HEAD_DIM_V, device: DeviceLike = None, max_parts: int = 0,
                    min_parts: int = 0, batch_invariant: bool = False, schedule_placement: int = 0) -> "_Plan":
        """The plan for these tensors' shapes (their values are not read).

        index: block_table [batch, max_pages_per_seq] (dense) or indices [batch, s_q, topk] (sparse).
        """
        plan = cls.__new__(cls)
        shape = cls._shape_fn(ref(q), ref(kv_cache), ref(index), d_v)
        plan._init_from_shape(shape, q.device if device is None else device, max_parts, min_parts, batch_invariant,
                              schedule_placement)
        return plan

    def check_tensors(self, q: torch.Tensor, kv_cache: torch.Tensor, index: torch.Tensor, d_v: int) -> None:
        """Raises ValueError (with the C++ message) when the tensors need another plan."""
        shape = type(self)._shape_fn(ref(q), ref(kv_cache), ref(index), d_v)
        expected = type(self)._plan_fn(shape, self.device_info, self.options)
        _C.check_plan_matches(self._entry, self._plan, expected)

    @property
    def options(self) -> "_C.PlanOptions":
        return plan_options(self.max_parts, self.min_parts, self.batch_invariant, self.schedule_placement)

    @property
    def workspace_bytes(self) -> int:
        """Bytes the run needs as workspace (schedule, scheduler scratch, split accumulators)."""
        return self._plan.workspace_bytes

    @property
    def num_parts(self) -> int:
        return self._plan.num_parts

    @property
    def num_slots(self) -> int:
        return self._plan.num_slots

    @property
    def chunk_blocks(self) -> int:
        """Batch-invariant mode: 64-token KV blocks per fixed chunk of a request; 0 in the default mode."""
        return self._plan.chunk_blocks

    @property
    def schedule_in_kernel(self) -> bool:
        """True when the attention kernel builds the split-KV schedule itself (a call launches no schedule kernel)."""
        return self._plan.schedule_in_kernel

    @property
    def workspace_regions(self) -> dict:
        """Region name -> (offset, bytes) inside the workspace."""
        return self._plan.workspace_regions

    def alloc_workspace(self, device: DeviceLike = None) -> torch.Tensor:
        """A uint8 tensor of workspace_bytes on `device` (default: the plan's device).

        torch's allocators return 512-byte aligned blocks, more than the 256
        bytes the run requires. Allocate it before capturing a CUDA graph and
        keep it alive as long as the graph.
        """
        target = self.device if device is None else _as_torch_device(device)
        return torch.empty(self.workspace_bytes, dtype=torch.uint8, device=target)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(device={self.device}, num_parts={self.num_parts}, "
                f"num_slots={self.num_slots}, workspace_bytes={self.workspace_bytes}, "
                f"schedule_in_kernel={self.schedule_in_kernel})")


class DensePlan(_Plan):
    """Plan for dense decode (BF16/FP16, or FP8 per-tensor) over a paged KV cache.

    Shapes: q [batch, s_q, h_q, d_qk], kv_cache [num_pages, page_size, h_kv, d_qk],
    block_table [batch, max_pages_per_seq]. `device` is a torch device, a CUDA
    index, or an explicit DeviceInfo. max_parts / min_parts clamp the number of
    SM parts (1 forces the no-split path). batch_invariant: every request's out
    and LSE are bitwise the same whatever else is in the batch
    (docs/batch_invariance.md; not with max_parts / min_parts). schedule_placement:
    where a call builds the split-KV schedule: 0 the planner's choice, 1 a schedule
    kernel before the attention kernel, 2 the attention kernel itself (refused with
    batch_invariant); see `schedule_in_kernel`.
    """

    _entry = "dense_decode"
    _plan_fn = staticmethod(_C.plan_dense_decode)
    _shape_fn = staticmethod(_C.dense_decode_shape)

    def __init__(self, *, batch: int, h_q: int, num_pages: int, max_pages_per_seq: int, s_q: int = 1,
                 h_kv: int = 1, page_size: int = 64, d_qk: int = _C.HEAD_DIM_QK, d_v: int = _C.HEAD_DIM_V,
                 dtype: torch.dtype = torch.bfloat16, device: DeviceLike = None, max_parts: int = 0,
                 min_parts: int = 0, batch_invariant: bool = False, schedule_placement: int = 0):
        shape = _C.DenseDecodeShape()
        _set_sizes("plan_dense_decode", shape, batch=batch, s_q=s_q, h_q=h_q, h_kv=h_kv, d_qk=d_qk, d_v=d_v,
                   page_size=page_size, num_pages=num_pages, max_pages_per_seq=max_pages_per_seq)
        shape.q_dtype = shape.kv_dtype = _dtype_enum(dtype)
        shape.out_dtype = _C.DType.bf16 if dtype == torch.float8_e4m3fn else shape.q_dtype
        self._init_from_shape(shape, device, max_parts, min_parts, batch_invariant, schedule_placement)


class SparsePlan(_Plan):
    """Plan for sparse decode over the 656-byte FP8 cache (DeepSeek-V3.2).

    Shapes: q [batch, s_q, h_q, 576] bf16, kv_cache [num_pages, page_size, 1, 656]
    bytes, indices [batch, s_q, topk] int32. batch_invariant, schedule_placement: as for DensePlan.
    """

    _entry = "sparse_decode"
    _plan_fn = staticmethod(_C.plan_sparse_decode)
    _shape_fn = staticmethod(_C.sparse_decode_shape)

    def __init__(self, *, batch: int, h_q: int, topk: int, num_pages: int, s_q: int = 1,
                 page_size: int = 64, d_qk: int = _C.HEAD_DIM_QK, d_v: int = _C.HEAD_DIM_V,
                 device: DeviceLike = None, max_parts: int = 0, min_parts: int = 0,
                 batch_invariant: bool = False, schedule_placement: int = 0):
        shape = _C.SparseDecodeShape()
        _set_sizes("plan_sparse_decode", shape, batch=batch, s_q=s_q, h_q=h_q, topk=topk, d_qk=d_qk, d_v=d_v,
                   page_size=page_size, num_pages=num_pages)
        self._init_from_shape(shape, device, max_parts, min_parts, batch_invariant, schedule_placement)

