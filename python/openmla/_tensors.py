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
