"""torch tensors as the binding sees them: a TensorRef per tensor, a stream handle.

The extension never links against torch. Each tensor crosses as its address,
dtype name, sizes, strides (in elements) and device; the C++ side checks them
(openmla/python/src/tensor_args.cpp) and reports problems with the C++ API's
message format.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

from openmla import _C

# torch dtype -> the name the binding expects ("torch.bfloat16" -> "bfloat16").
_DTYPE_NAMES: dict = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype).removeprefix("torch.")
        _DTYPE_NAMES[dtype] = name
    return name


def device_index(device: torch.device) -> int:
    """_C.CPU_DEVICE for the CPU, the CUDA index otherwise."""
    if device.type == "cpu":
        return _C.CPU_DEVICE
    if device.type == "cuda":
        return device.index if device.index is not None else torch.cuda.current_device()
    raise ValueError(
        f"openmla: argument 'device' is not supported: got {device}, expected cpu or cuda")


def ref(t: torch.Tensor) -> _C.TensorRef:
    """A borrowed description of `t`; `t` must outlive the call that uses it."""
    return _C.TensorRef(t.data_ptr(), _dtype_name(t.dtype), t.element_size(), t.shape, t.stride(),
                        device_index(t.device))


def ref_or_none(t: Optional[torch.Tensor]) -> Optional[_C.TensorRef]:
    return None if t is None else ref(t)


def stream_handle(device: torch.device) -> int:
    """The current torch stream on `device` as a cudaStream_t value (0 on the CPU)."""
    if device.type != "cuda":
        return 0
    return torch.cuda.current_stream(device).cuda_stream


def on_device(device: torch.device):
    """Makes `device` current for the duration (kernels launch on the current device)."""
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def check_devices(entry: str, tensors) -> None:
    """Every given tensor on cpu or cuda, named otherwise.

    `tensors` holds (name, tensor or None) pairs. A meta tensor would route the
    op to its fake implementation (uninitialised outputs); other devices have
    no kernel. The C++ side then checks they all share q's device.
    """
    for name, t in tensors:
        if t is not None and t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{entry}: argument '{name}' is on an unsupported device: got {name}.device = "
                             f"{t.device}, expected cpu or cuda")


def default_softmax_scale(q: torch.Tensor) -> float:
    """1 / sqrt(d_qk); 1.0 when q has no usable last dim (the C++ checks then name q or d_qk)."""
    d_qk = q.shape[-1] if q.dim() > 0 else 0
    return d_qk ** -0.5 if d_qk > 0 else 1.0


def softmax_scale_arg(entry: str, q: torch.Tensor, value, name: str = "softmax_scale") -> float:
    """The softmax_scale argument as a float (default 1 / sqrt(d_qk)); a non-number is named.

    `name` is the caller's name for the argument (sm_scale in FlashMLA's prefill).
    """
    if value is None:
        return default_softmax_scale(q)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{entry}: argument '{name}' must be a number: got {name} = {value!r} "
                        f"({type(value).__name__}), expected a float") from None


def check_sm_scale(entry: str, sm_scale) -> None:
    """FlashMLA's flash_mla_sparse_fwd has no default scale: None is named rather than replaced."""
    if sm_scale is None:
        raise ValueError(f"{entry}: argument 'sm_scale' is missing: got sm_scale = None, expected a float "
                         "(FlashMLA's sparse prefill has no default scale; 1 / sqrt(d_qk) is the usual one)")


def check_d_v(entry: str, d_v, name: str = "d_v") -> None:
    """d_v before outputs are allocated from it (the C++ checks come later); `name` is the caller's (head_dim_v)."""
    if d_v != _C.HEAD_DIM_V:
        error = ValueError if not isinstance(d_v, int) or d_v < 1 else NotImplementedError
        raise error(f"{entry}: argument '{name}' is not supported: got {name} = {d_v!r}, expected "
                    f"{name} == {_C.HEAD_DIM_V}")


def d_v_arg(entry: str, d_v, name: str = "d_v") -> int:
    """The d_v argument as an int, named (as the caller calls it) when it is not the supported value."""
    check_d_v(entry, d_v, name)
    return int(d_v)
