"""torch.library custom ops: openmla::dense_decode, openmla::sparse_decode, openmla::sparse_prefill.

Each op has a real implementation (CPU tensors: the C++ reference; CUDA
tensors: the kernels, on torch's current stream) and a fake one that only
produces output shapes, so the ops trace under torch.compile and are captured
into CUDA graphs like any other torch op.

Plans travel as plain values (num_sms, max_parts, min_parts, batch_invariant,
schedule_placement): planning is a pure
function of shapes, so the implementation rebuilds the same plan from the
tensors. The workspace is an argument the op writes (mutates_args); when it is
None the op allocates one from torch's allocator (stream-ordered, and from the
graph's private pool while capturing).
"""

# NOTE: no `from __future__ import annotations`: custom_op reads the annotations
# to infer the schema, and older torch versions need real types there.
from typing import Optional, Tuple

import torch
from torch import Tensor

from openmla import _C
from openmla._plans import run_config
from openmla._tensors import check_d_v, check_devices, on_device, ref, ref_or_none, stream_handle


def _dense_out_dtype(q_dtype: torch.dtype) -> torch.dtype:
    # FP8 inputs write BF16; BF16/FP16 write their own type.
    return torch.bfloat16 if q_dtype == torch.float8_e4m3fn else q_dtype


def _leading(t: Tensor, rank: int, count: int) -> list:
    """The first `count` sizes of `t` when it has `rank` dims, else ones (C++ then names the rank error)."""
    return list(t.shape[:count]) if t.dim() == rank else [1] * count


def _check_dense_devices(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale):
    check_devices("dense_decode", (("q", q), ("kv_cache", kv_cache), ("block_table", block_table),
                                   ("seqlens", seqlens), ("workspace", workspace), ("q_scale", q_scale),
                                   ("kv_scale", kv_scale)))


def _check_sparse_devices(q, kv_cache, indices, workspace, topk_length, attn_sink):
    check_devices("sparse_decode", (("q", q), ("kv_cache", kv_cache), ("indices", indices), ("workspace", workspace),
                                    ("topk_length", topk_length), ("attn_sink", attn_sink)))


def _check_prefill_devices(q, kv, indices, topk_length, attn_sink):
    check_devices("sparse_prefill", (("q", q), ("kv", kv), ("indices", indices), ("topk_length", topk_length),
                                     ("attn_sink", attn_sink)))


# ---------------------------------------------------------------------------
# Dense decode
# ---------------------------------------------------------------------------
@torch.library.custom_op("openmla::dense_decode", mutates_args=("workspace",))
def dense_decode_op(q: Tensor, kv_cache: Tensor, block_table: Tensor, seqlens: Tensor,
                    workspace: Optional[Tensor], q_scale: Optional[Tensor], kv_scale: Optional[Tensor],
                    softmax_scale: float, causal: bool, d_v: int, num_sms: int, max_parts: int,
                    min_parts: int, batch_invariant: bool = False,
                    schedule_placement: int = 0) -> Tuple[Tensor, Tensor]:
    """out [batch, s_q, h_q, d_v], lse [batch, h_q, s_q] fp32 (natural log; +inf for an empty row)."""
    _check_dense_devices(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale)
    check_d_v("dense_decode", d_v)
    q_ref, kv_ref, table_ref = ref(q), ref(kv_cache), ref(block_table)
    # Shapes checked (arguments named) before any output is allocated from them.
    shape = _C.dense_decode_shape(q_ref, kv_ref, table_ref, d_v)
    b, s_q, h_q = shape.batch, shape.s_q, shape.h_q
    out = torch.empty((b, s_q, h_q, d_v), dtype=_dense_out_dtype(q.dtype), device=q.device)
    lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device=q.device)
    info, options = run_config(q.device, num_sms, max_parts, min_parts, batch_invariant, schedule_placement,
                               entry="dense_decode")
    if q.device.type == "cpu":
        _C.dense_decode(q_ref, kv_ref, table_ref, ref(seqlens), ref(out), ref(lse), ref_or_none(q_scale),
                        ref_or_none(kv_scale), softmax_scale, causal, info, options, ref_or_none(workspace), 0)
        return out, lse
    if workspace is None:
        workspace = torch.empty(_C.plan_dense_decode(shape, info, options).workspace_bytes,
                                dtype=torch.uint8, device=q.device)
    with on_device(q.device):
        _C.dense_decode(q_ref, kv_ref, table_ref, ref(seqlens), ref(out), ref(lse), ref_or_none(q_scale),
                        ref_or_none(kv_scale), softmax_scale, causal, info, options, ref(workspace),
                        stream_handle(q.device))
    return out, lse


@dense_decode_op.register_fake
def _dense_decode_fake(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale, softmax_scale, causal,
                       d_v, num_sms, max_parts, min_parts, batch_invariant=False, schedule_placement=0):
    _check_dense_devices(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale)
    check_d_v("dense_decode", d_v)
    b, s_q, h_q = _leading(q, 4, 3)
    out = q.new_empty((b, s_q, h_q, d_v), dtype=_dense_out_dtype(q.dtype))
    lse = q.new_empty((b, h_q, s_q), dtype=torch.float32)
    return out, lse


# ---------------------------------------------------------------------------
# Sparse decode (656-byte FP8 cache)
# ---------------------------------------------------------------------------
@torch.library.custom_op("openmla::sparse_decode", mutates_args=("workspace",))
def sparse_decode_op(q: Tensor, kv_cache: Tensor, indices: Tensor, workspace: Optional[Tensor],
                     topk_length: Optional[Tensor], attn_sink: Optional[Tensor], softmax_scale: float, d_v: int,
                     num_sms: int, max_parts: int, min_parts: int,
                     batch_invariant: bool = False, schedule_placement: int = 0) -> Tuple[Tensor, Tensor]:
    """out [batch, s_q, h_q, d_v] bf16, lse [batch, h_q, s_q] fp32."""
    _check_sparse_devices(q, kv_cache, indices, workspace, topk_length, attn_sink)
    check_d_v("sparse_decode", d_v)
    q_ref, kv_ref, indices_ref = ref(q), ref(kv_cache), ref(indices)
    # Shapes checked (arguments named) before any output is allocated from them.
    shape = _C.sparse_decode_shape(q_ref, kv_ref, indices_ref, d_v)
    b, s_q, h_q = shape.batch, shape.s_q, shape.h_q
    out = torch.empty((b, s_q, h_q, d_v), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device=q.device)
    info, options = run_config(q.device, num_sms, max_parts, min_parts, batch_invariant, schedule_placement,
                               entry="sparse_decode")
    if q.device.type == "cpu":
        _C.sparse_decode(q_ref, kv_ref, indices_ref, ref_or_none(topk_length), ref_or_none(attn_sink), ref(out),
                         ref(lse), softmax_scale, info, options, ref_or_none(workspace), 0)
        return out, lse
    if workspace is None:
        workspace = torch.empty(_C.plan_sparse_decode(shape, info, options).workspace_bytes,
                                dtype=torch.uint8, device=q.device)
    with on_device(q.device):
        _C.sparse_decode(q_ref, kv_ref, indices_ref, ref_or_none(topk_length), ref_or_none(attn_sink), ref(out),
                         ref(lse), softmax_scale, info, options, ref(workspace), stream_handle(q.device))
    return out, lse


@sparse_decode_op.register_fake
def _sparse_decode_fake(q, kv_cache, indices, workspace, topk_length, attn_sink, softmax_scale, d_v, num_sms,
                        max_parts, min_parts, batch_invariant=False, schedule_placement=0):
    _check_sparse_devices(q, kv_cache, indices, workspace, topk_length, attn_sink)
    check_d_v("sparse_decode", d_v)
    b, s_q, h_q = _leading(q, 4, 3)
    return (q.new_empty((b, s_q, h_q, d_v), dtype=torch.bfloat16),
            q.new_empty((b, h_q, s_q), dtype=torch.float32))


# ---------------------------------------------------------------------------
# Sparse prefill
# ---------------------------------------------------------------------------
@torch.library.custom_op("openmla::sparse_prefill", mutates_args=())
def sparse_prefill_op(q: Tensor, kv: Tensor, indices: Tensor, topk_length: Optional[Tensor],
                      attn_sink: Optional[Tensor], softmax_scale: float, d_v: int,
                      batch_invariant: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    """out [s_q, h_q, d_v] bf16, max_logits [s_q, h_q] fp32 (-inf if empty), lse [s_q, h_q] fp32 (+inf if empty)."""
    _check_prefill_devices(q, kv, indices, topk_length, attn_sink)
    check_d_v("sparse_prefill", d_v)
    s_q, h_q = _leading(q, 3, 2)
    out = torch.empty((s_q, h_q, d_v), dtype=torch.bfloat16, device=q.device)
    max_logits = torch.empty((s_q, h_q), dtype=torch.float32, device=q.device)
    lse = torch.empty((s_q, h_q), dtype=torch.float32, device=q.device)
    info, options = run_config(q.device, 0, 0, 0, batch_invariant, entry="sparse_prefill")
    args = (ref(q), ref(kv), ref(indices), ref_or_none(topk_length), ref_or_none(attn_sink), ref(out),
            ref(max_logits), ref(lse), softmax_scale, info, options)
    workspace = None
    if q.device.type != "cpu":  # every argument is checked (and named) before the workspace is sized
        workspace = torch.empty(_C.sparse_prefill_workspace_bytes(*args), dtype=torch.uint8, device=q.device)
    with on_device(q.device):
        _C.sparse_prefill(*args, ref_or_none(workspace), stream_handle(q.device))
    return out, max_logits, lse


@sparse_prefill_op.register_fake
def _sparse_prefill_fake(q, kv, indices, topk_length, attn_sink, softmax_scale, d_v, batch_invariant=False):
    _check_prefill_devices(q, kv, indices, topk_length, attn_sink)
    check_d_v("sparse_prefill", d_v)
    s_q, h_q = _leading(q, 3, 2)
    return (q.new_empty((s_q, h_q, d_v), dtype=torch.bfloat16), q.new_empty((s_q, h_q), dtype=torch.float32),
            q.new_empty((s_q, h_q), dtype=torch.float32))
