"""The Pythonic entry points: dense_decode, sparse_decode, sparse_prefill.

Each one fills defaults and checks a given plan against the tensors (once per
plan and shapes; the C++ run checks the workspace either way). Eager calls on
plain tensors take the prepared-call fast path (openmla/_eager.py: no
dispatcher, no re-planning or re-checking for shapes seen before); under
torch.compile or on fake/subclass tensors they call the custom op, whose
implementation runs the same C++.
"""

from __future__ import annotations

import contextlib
from typing import Optional, Tuple

import torch
from torch import Tensor

from openmla import _C, _eager
from openmla._plans import DensePlan, SparsePlan, check_plan_type
from openmla._tensors import d_v_arg, softmax_scale_arg

# Importing registers the ops under torch.ops.openmla.
from openmla import _ops  # noqa: F401


def _stream_context(stream: Optional[torch.cuda.Stream]):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def _plan_ints(plan) -> Tuple[int, int, int, int]:
    """What a run re-plans from: (num_sms, max_parts, min_parts, schedule_placement)."""
    return (plan.num_sms, plan.max_parts, plan.min_parts, plan.schedule_placement) if plan is not None else (0, 0, 0, 0)


def _batch_invariant_arg(entry: str, plan, batch_invariant) -> bool:
    """The call's mode: the plan's when a plan is given (the keyword must then agree or be left False)."""
    if not isinstance(batch_invariant, bool):
        raise TypeError(f"{entry}: argument 'batch_invariant' must be a bool: got "
                        f"{type(batch_invariant).__name__}, expected True or False")
    if plan is None:
        return batch_invariant
    if batch_invariant and not plan.batch_invariant:
        raise ValueError(f"{entry}: argument 'batch_invariant' disagrees with the plan: got batch_invariant = True, "
                         f"plan.batch_invariant = False, expected a plan made with batch_invariant=True")
    return plan.batch_invariant


def _check_plan_once(plan, q: Tensor, kv_cache: Tensor, index: Tensor, d_v: int) -> None:
    """plan.check_tensors, skipped for shapes this plan was already checked against."""
    checked = plan.__dict__.setdefault("_checked_shapes", set())
    key = (q.shape, q.dtype, kv_cache.shape, kv_cache.dtype, index.shape, d_v)
    if key not in checked:
        plan.check_tensors(q, kv_cache, index, d_v)
        checked.add(key)


def dense_decode(q: Tensor, kv_cache: Tensor, block_table: Tensor, seqlens: Tensor, *,
                 plan: Optional[DensePlan] = None, workspace: Optional[Tensor] = None,
                 softmax_scale: Optional[float] = None, causal: bool = False, q_scale: Optional[Tensor] = None,
                 kv_scale: Optional[Tensor] = None, d_v: int = _C.HEAD_DIM_V,
                 stream: Optional[torch.cuda.Stream] = None, batch_invariant: bool = False) -> Tuple[Tensor, Tensor]:
    """Dense MLA decode over a paged KV cache.

    q [batch, s_q, h_q, d_qk] (bf16, fp16 or fp8), kv_cache [num_pages, page_size, h_kv, d_qk]
    (same dtype; V is its first d_v dims), block_table [batch, max_pages_per_seq] int32,
    seqlens [batch] int32. FP8 needs q_scale and kv_scale ([1] fp32).
    Returns out [batch, s_q, h_q, d_v] (bf16 for fp8 inputs, else q's dtype) and
    lse [batch, h_q, s_q] fp32 (natural log; +inf for an empty row).

    plan: a DensePlan for these shapes (default: planned for q's device);
    workspace: plan.alloc_workspace() (default: allocated per call);
    softmax_scale: default 1/sqrt(d_qk); causal: query row i of s_q sees keys
    [0, seqlen - s_q + i]; stream: default torch.cuda.current_stream();
    batch_invariant: each request's out and LSE are bitwise the same whatever
    else is in the batch (docs/batch_invariance.md; a given plan's mode wins).
    CPU tensors run the C++ reference.
    """
    softmax_scale = softmax_scale_arg("dense_decode", q, softmax_scale)
    d_v = d_v_arg("dense_decode", d_v)
    eager = _eager.applies(q)
    if plan is not None:
        check_plan_type("dense_decode", plan, DensePlan)
        if eager:
            _check_plan_once(plan, q, kv_cache, block_table, d_v)
    batch_invariant = _batch_invariant_arg("dense_decode", plan, batch_invariant)
    num_sms, max_parts, min_parts, placement = _plan_ints(plan)
    with _stream_context(stream):  # outputs are allocated on the stream that uses them
        if eager:
            return _eager.dense_decode(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale,
                                       float(softmax_scale), bool(causal), int(d_v), num_sms, max_parts,
                                       min_parts, batch_invariant=batch_invariant, schedule_placement=placement)
        return torch.ops.openmla.dense_decode(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale,
                                              float(softmax_scale), bool(causal), d_v, num_sms, max_parts,
                                              min_parts, batch_invariant, placement)


def sparse_decode(q: Tensor, kv_cache: Tensor, indices: Tensor, *, plan: Optional[SparsePlan] = None,
                  workspace: Optional[Tensor] = None, softmax_scale: Optional[float] = None,
                  topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                  d_v: int = _C.HEAD_DIM_V, stream: Optional[torch.cuda.Stream] = None,
                  batch_invariant: bool = False) -> Tuple[Tensor, Tensor]:
    """Sparse MLA decode (DeepSeek Sparse Attention) over the 656-byte FP8 cache.

    q [batch, s_q, h_q, 576] bf16, kv_cache [num_pages, page_size, 1, 656] uint8 or
    float8_e4m3fn bytes, indices [batch, s_q, topk] int32 (page * page_size + offset;
    -1 skips), topk_length [batch] int32, attn_sink [h_q] fp32.
    Returns out [batch, s_q, h_q, d_v] bf16 and lse [batch, h_q, s_q] fp32.
    batch_invariant: as for dense_decode (every (request, query token) row is
    independent of the rest of the batch).
    """
    softmax_scale = softmax_scale_arg("sparse_decode", q, softmax_scale)
    d_v = d_v_arg("sparse_decode", d_v)
    eager = _eager.applies(q)
    if plan is not None:
        check_plan_type("sparse_decode", plan, SparsePlan)
        if eager:
            _check_plan_once(plan, q, kv_cache, indices, d_v)
    batch_invariant = _batch_invariant_arg("sparse_decode", plan, batch_invariant)
    num_sms, max_parts, min_parts, placement = _plan_ints(plan)
    with _stream_context(stream):  # outputs are allocated on the stream that uses them
        if eager:
            return _eager.sparse_decode(q, kv_cache, indices, workspace, topk_length, attn_sink,
                                        float(softmax_scale), int(d_v), num_sms, max_parts, min_parts,
                                        batch_invariant=batch_invariant, schedule_placement=placement)
        return torch.ops.openmla.sparse_decode(q, kv_cache, indices, workspace, topk_length, attn_sink,
                                               float(softmax_scale), d_v, num_sms, max_parts, min_parts,
                                               batch_invariant, placement)


def sparse_prefill(q: Tensor, kv: Tensor, indices: Tensor, *, softmax_scale: Optional[float] = None,
                   topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                   d_v: int = _C.HEAD_DIM_V,
                   stream: Optional[torch.cuda.Stream] = None,
                   batch_invariant: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    """Sparse MLA prefill: q [s_q, h_q, d_qk] bf16, kv [s_kv, 1, d_qk] bf16, indices [s_q, 1, topk] int32.

    kv may instead be sparse decode's 656-byte FP8 cache, a 1-byte tensor [num_pages, page_size, 1, 656]
    (indices = page * page_size + offset, d_qk = 576): the rows are read and dequantised in place, with
    no BF16 copy of the cache (on the GPU: h_q in {8, 16, 32, 64, 128}, topk a multiple of 64).
    Returns out [s_q, h_q, d_v] bf16, max_logits [s_q, h_q] fp32 and lse [s_q, h_q] fp32
    (empty rows: max_logits -inf, lse +inf, out 0).
    batch_invariant=True: each query token's results are bitwise the same whichever other tokens the call
    holds (docs/batch_invariance.md).
    """
    return _sparse_prefill(_eager.PREFILL, q, kv, indices, softmax_scale, topk_length, attn_sink, d_v, stream,
                           batch_invariant)


def _sparse_prefill(entry: "_eager.Entry", q: Tensor, kv: Tensor, indices: Tensor, softmax_scale: Optional[float],
                    topk_length: Optional[Tensor], attn_sink: Optional[Tensor], d_v: int,
                    stream: Optional[torch.cuda.Stream],
                    batch_invariant: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    """sparse_prefill, with errors named for `entry` (the public function the caller used)."""
    softmax_scale = softmax_scale_arg(entry.name, q, softmax_scale, entry.public("softmax_scale"))
    d_v = d_v_arg(entry.name, d_v, entry.public("d_v"))
    batch_invariant = _batch_invariant_arg(entry.name, None, batch_invariant)
    try:
        with _stream_context(stream):
            return torch.ops.openmla.sparse_prefill(q, kv, indices, topk_length, attn_sink, float(softmax_scale), d_v,
                                                    batch_invariant)
    except (ValueError, NotImplementedError) as error:
        raise _eager.public_error(error, entry) from None
