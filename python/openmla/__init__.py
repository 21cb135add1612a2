"""OpenMLA: Multi-head Latent Attention kernels for Hopper, from Python.

    import torch, openmla
    plan = openmla.DensePlan(batch=4, h_q=128, num_pages=64, max_pages_per_seq=16, device="cuda")
    workspace = plan.alloc_workspace()
    out, lse = openmla.dense_decode(q, kv_cache, block_table, seqlens, plan=plan, workspace=workspace)

- DensePlan / SparsePlan: shapes + device -> workspace size (never lengths).
- dense_decode / sparse_decode / sparse_prefill: run on torch's current stream;
  CPU tensors run the C++ reference.
- torch.ops.openmla.{dense_decode, sparse_decode, sparse_prefill}: the same as
  custom ops with fake implementations (torch.compile, CUDA graphs).
- openmla.flash_mla: FlashMLA's Python API on top of these.

Bad arguments raise ValueError, unsupported ones NotImplementedError, CUDA
failures RuntimeError, each with the C++ API's message.
"""

from openmla import _C
from openmla._api import dense_decode, sparse_decode, sparse_prefill
from openmla._plans import DensePlan, SparsePlan, device_info

__version__ = "0.1.0"

DeviceInfo = _C.DeviceInfo
HEAD_DIM_QK = _C.HEAD_DIM_QK
HEAD_DIM_V = _C.HEAD_DIM_V

__all__ = [
    "DensePlan",
    "SparsePlan",
    "DeviceInfo",
    "device_info",
    "dense_decode",
    "sparse_decode",
    "sparse_prefill",
    "HEAD_DIM_QK",
    "HEAD_DIM_V",
]
