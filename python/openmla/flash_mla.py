"""FlashMLA's Python API on OpenMLA: switch by changing one import.

    from openmla.flash_mla import get_mla_metadata, flash_mla_with_kvcache, flash_mla_sparse_fwd

Same signatures, shapes, dtypes and LSE convention as FlashMLA (deepseek-ai/FlashMLA,
flash_mla_interface.py): q [b, s_q, h_q, d], k_cache [num_blocks, page_block_size, h_kv, d],
out [b, s_q, h_q, d_v], lse [b, h_q, s_q] float32 (natural log, +inf for an empty row).

How the scheduling metadata maps
--------------------------------
OpenMLA has no separate metadata kernel: every call rebuilds its split-KV
schedule on the device from cache_seqlens (or topk_length), inside a workspace
whose size the planner fixes from shapes alone. So FlashMLA's metadata becomes
that workspace:

================================  ============================================================
FlashMLA                          openmla.flash_mla
================================  ============================================================
get_mla_metadata(cache_seqlens,   (tile_scheduler_metadata, num_splits) where
  num_q_tokens_per_head_k,        tile_scheduler_metadata is an int32 tensor of
  num_heads_k, ...)  (old style)  ceil(plan.workspace_bytes / 4) elements on cache_seqlens'
                                  device: the run's workspace (schedule records, scheduler
                                  scratch, split accumulators). num_splits is an int32
                                  [b + 1] placeholder that is never read.
get_mla_metadata()  (new style)   (FlashMLASchedMeta(), None); the first call of
                                  flash_mla_with_kvcache plans for its tensors and allocates
                                  the workspace (meta.plan, meta.tile_scheduler_metadata).
================================  ============================================================

Differences that only widen what works: a metadata object or tensor stays
valid when the values of cache_seqlens / topk_length change (the schedule is
rebuilt on every call, also on every CUDA-graph replay); only the shapes it
was made for must stay. Passing None as tile_scheduler_metadata allocates a
workspace per call. A workspace too small for the call raises ValueError.
The sparse prefill GPU kernel does not exist yet: flash_mla_sparse_fwd raises
NotImplementedError on CUDA tensors (CPU tensors run the reference).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from openmla._api import dense_decode, sparse_decode, sparse_prefill
from openmla._plans import DensePlan, SparsePlan

__all__ = ["FlashMLASchedMeta", "get_mla_metadata", "flash_mla_with_kvcache", "flash_mla_sparse_fwd"]


@dataclasses.dataclass
class FlashMLASchedMeta:
    """Metadata of the new-style get_mla_metadata(): filled by the first flash_mla_with_kvcache call."""

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    plan: Optional[Union[DensePlan, SparsePlan]] = None
    # The workspace (uint8), under FlashMLA's name for the metadata tensor.
    tile_scheduler_metadata: Optional[Tensor] = None
    num_splits: Optional[Tensor] = None


def _old_style_metadata(cache_seqlens: Tensor, num_q_tokens_per_head_k: int, num_heads_k: int,
                        num_heads_q: Optional[int] = None, is_fp8_kvcache: bool = False,
                        topk: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    if cache_seqlens.dim() != 1:
        raise ValueError("get_mla_metadata: argument 'cache_seqlens' has the wrong number of dimensions: got "
                         f"cache_seqlens.shape = {list(cache_seqlens.shape)}, expected 1 dimension [batch]")
    for name, value in (("num_q_tokens_per_head_k", num_q_tokens_per_head_k), ("num_heads_k", num_heads_k),
                        ("num_heads_q", num_heads_q)):
        if value is not None and int(value) < 1:
            raise ValueError(f"get_mla_metadata: argument '{name}' is too small: got {name} = {value}, "
                             f"expected {name} >= 1")
    device = cache_seqlens.device
    batch = cache_seqlens.shape[0]
    rows_per_head_k = int(num_q_tokens_per_head_k)  # s_q * h_q / h_kv
    h_kv = int(num_heads_k)
    if topk is None:
        # Dense: the workspace depends on s_q * h_q only, so any split of the rows will do.
        if num_heads_q is not None:
            h_q = int(num_heads_q)
            s_q = max(1, rows_per_head_k * h_kv // h_q)
        else:
            per_kv = max(d for d in range(1, max(1, min(rows_per_head_k, 128 // h_kv)) + 1)
                         if rows_per_head_k % d == 0)
            h_q, s_q = per_kv * h_kv, rows_per_head_k // per_kv
        # Page size and page counts do not change the workspace.
        plan = DensePlan(batch=batch, s_q=s_q, h_q=h_q, h_kv=h_kv, num_pages=1, max_pages_per_seq=1,
                         dtype=torch.float8_e4m3fn if is_fp8_kvcache else torch.bfloat16, device=device)
    else:
        if num_heads_q is None:
            raise ValueError("get_mla_metadata: argument 'num_heads_q' is missing: got None, expected the number "
                             "of query heads when topk is given (sparse attention)")
        h_q = int(num_heads_q)
        plan = SparsePlan(batch=batch, s_q=max(1, rows_per_head_k * h_kv // h_q), h_q=h_q, topk=int(topk),
                          num_pages=1, device=device)
    metadata = torch.empty((plan.workspace_bytes + 3) // 4, dtype=torch.int32, device=device)
    num_splits = torch.zeros(batch + 1, dtype=torch.int32, device=device)
    return metadata, num_splits


def get_mla_metadata(*args, **kwargs):
    """FlashMLA's get_mla_metadata, both styles.

    New style, no arguments: returns (FlashMLASchedMeta(), None), filled on first use.
    Old style, get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k,
    num_heads_q=None, is_fp8_kvcache=False, topk=None): returns
    (tile_scheduler_metadata, num_splits) tensors; tile_scheduler_metadata is the
    run's workspace (see the module docstring), num_splits a placeholder.
    """
    if not args and not kwargs:
        return FlashMLASchedMeta(), None
    return _old_style_metadata(*args, **kwargs)


def _check_config(meta: FlashMLASchedMeta, config: FlashMLASchedMeta.Config) -> None:
    if meta.config == config:
        return
    got = ", ".join(f"{f.name} = {getattr(config, f.name)}" for f in dataclasses.fields(config)
                    if getattr(config, f.name) != getattr(meta.config, f.name))
    expected = ", ".join(f"{f.name} = {getattr(meta.config, f.name)}" for f in dataclasses.fields(config)
                         if getattr(config, f.name) != getattr(meta.config, f.name))
    raise ValueError("flash_mla_with_kvcache: argument 'tile_scheduler_metadata' was filled for other arguments: "
                     f"got {got}, expected {expected} (use one metadata object per shape)")


def _workspace(metadata, config: FlashMLASchedMeta.Config, make_plan) -> Optional[Tensor]:
    if metadata is None:
        return None
    if isinstance(metadata, Tensor):
        return metadata if metadata.dtype == torch.uint8 else metadata.view(torch.uint8)
    if not isinstance(metadata, FlashMLASchedMeta):
        raise TypeError("flash_mla_with_kvcache: argument 'tile_scheduler_metadata' has an unsupported type: "
                        f"got {type(metadata).__name__}, expected the result of get_mla_metadata(), a tensor or None")
    if metadata.have_initialized:
        _check_config(metadata, config)
        return metadata.tile_scheduler_metadata
    if torch.compiler.is_compiling():
        return None  # planning is host code: fill the metadata in an eager call before compiling
    metadata.plan = make_plan()
    metadata.tile_scheduler_metadata = metadata.plan.alloc_workspace()
    metadata.config = config
    metadata.have_initialized = True
    return metadata.tile_scheduler_metadata


def flash_mla_with_kvcache(q: Tensor, k_cache: Tensor, block_table: Optional[Tensor], cache_seqlens: Optional[Tensor],
                           head_dim_v: int, tile_scheduler_metadata, num_splits=None,
                           softmax_scale: Optional[float] = None, causal: bool = False, is_fp8_kvcache: bool = False,
                           indices: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                           topk_length: Optional[Tensor] = None, *, descale_q: Optional[Tensor] = None,
                           descale_k: Optional[Tensor] = None, extra_k_cache: Optional[Tensor] = None,
                           extra_indices_in_kvcache: Optional[Tensor] = None,
                           extra_topk_length: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """FlashMLA's decode entry: dense (block_table + cache_seqlens) or sparse (indices).

    q [b, s_q, h_q, d]; dense: k_cache [num_blocks, page_block_size, h_kv, d] of q's dtype
    (FP8: is_fp8_kvcache=True with descale_q / descale_k [1] fp32); sparse: k_cache
    [num_blocks, page_block_size, 1, 656] bytes, indices [b, s_q, topk] int32, optional
    topk_length [b] int32 and attn_sink [h_q] fp32. num_splits is ignored.
    Returns out [b, s_q, h_q, head_dim_v] and lse [b, h_q, s_q] float32.
    """
    for name, value in (("extra_k_cache", extra_k_cache), ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                        ("extra_topk_length", extra_topk_length)):
        if value is not None:
            raise NotImplementedError(f"flash_mla_with_kvcache: argument '{name}' is not supported: got a tensor, "
                                      "expected None")
    for name, t in (("q", q), ("k_cache", k_cache)):
        if t.dim() != 4:
            raise ValueError(f"flash_mla_with_kvcache: argument '{name}' has the wrong number of dimensions: got "
                             f"{name}.shape = {list(t.shape)}, expected 4 dimensions")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5

    if indices is not None:
        # ---- sparse decode over the 656-byte FP8 cache ----
        if causal:
            raise ValueError("flash_mla_with_kvcache: argument 'causal' must be False with indices (sparse "
                             "attention): got causal = True, expected False")
        if not is_fp8_kvcache:
            raise ValueError("flash_mla_with_kvcache: argument 'is_fp8_kvcache' must be True with indices (sparse "
                             "attention reads the 656-byte FP8 cache): got False, expected True")
        config = FlashMLASchedMeta.Config(q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1], k_cache.shape[2],
                                          causal, is_fp8_kvcache, indices.shape[-1])
        workspace = _workspace(tile_scheduler_metadata, config,
                               lambda: SparsePlan.for_tensors(q, k_cache, indices, d_v=head_dim_v))
        return sparse_decode(q, k_cache, indices, workspace=workspace, softmax_scale=softmax_scale,
                             topk_length=topk_length, attn_sink=attn_sink, d_v=head_dim_v)

    # ---- dense decode ----
    for name, value in (("attn_sink", attn_sink), ("topk_length", topk_length)):
        if value is not None:
            raise ValueError(f"flash_mla_with_kvcache: argument '{name}' needs indices (sparse attention): got a "
                             "tensor with indices = None, expected None")
    for name, value in (("block_table", block_table), ("cache_seqlens", cache_seqlens)):
        if value is None:
            raise ValueError(f"flash_mla_with_kvcache: argument '{name}' is missing: got None, expected a tensor "
                             "for dense attention")
    if is_fp8_kvcache != (k_cache.dtype in (torch.uint8, torch.float8_e4m3fn)):
        # Either way the flag would be ignored: the cache's dtype decides.
        raise ValueError(f"flash_mla_with_kvcache: argument 'is_fp8_kvcache' does not match k_cache: got "
                         f"is_fp8_kvcache = {is_fp8_kvcache}, k_cache.dtype = {k_cache.dtype}, expected True exactly "
                         "for an FP8 cache (float8_e4m3fn or uint8)")
    if is_fp8_kvcache and k_cache.dtype == torch.uint8:
        k_cache = k_cache.view(torch.float8_e4m3fn)
    config = FlashMLASchedMeta.Config(q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1], k_cache.shape[2],
                                      causal, is_fp8_kvcache, None)
    workspace = _workspace(tile_scheduler_metadata, config,
                           lambda: DensePlan.for_tensors(q, k_cache, block_table, d_v=head_dim_v))
    return dense_decode(q, k_cache, block_table, cache_seqlens, workspace=workspace, softmax_scale=softmax_scale,
                        causal=causal, q_scale=descale_q, kv_scale=descale_k, d_v=head_dim_v)


def flash_mla_sparse_fwd(q: Tensor, kv: Tensor, indices: Tensor, sm_scale: float, d_v: int = 512,
                         attn_sink: Optional[Tensor] = None, topk_length: Optional[Tensor] = None,
                         indexer_topk: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    """FlashMLA's sparse prefill: q [s_q, h_q, d_qk] bf16, kv [s_kv, 1, d_qk] bf16, indices [s_q, 1, topk] int32.

    Returns (out [s_q, h_q, d_v] bf16, max_logits [s_q, h_q] fp32, lse [s_q, h_q] fp32).
    CUDA tensors raise NotImplementedError until the sparse prefill kernel exists;
    CPU tensors run the C++ reference.
    """
    if sm_scale is None:
        raise ValueError("flash_mla_sparse_fwd: argument 'sm_scale' is missing: got None, expected a float "
                         "(FlashMLA's sparse prefill has no default scale)")
    if indexer_topk:
        raise NotImplementedError(f"flash_mla_sparse_fwd: argument 'indexer_topk' is not supported: got "
                                  f"{indexer_topk}, expected 0")
    return sparse_prefill(q, kv, indices, softmax_scale=sm_scale, topk_length=topk_length, attn_sink=attn_sink,
                          d_v=d_v)

