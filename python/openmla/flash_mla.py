"""FlashMLA's Python API (deepseek-ai/FlashMLA 9241ae3) on OpenMLA: switch by changing one import.

    from openmla.flash_mla import FlashMLASchedMeta, get_mla_metadata, flash_mla_with_kvcache, flash_mla_sparse_fwd

The same names, signatures (names, positional order, defaults), shapes, dtypes and
LSE convention as the `flash_mla` package: q [b, s_q, h_q, d], k_cache [num_blocks,
page_block_size, h_k, d], out [b, s_q, h_q, head_dim_v], lse [b, h_q, s_q] float32
(natural log, +inf for an empty row). python/tests/test_flash_mla_api.py holds
FlashMLA's signatures as data and checks every function against them.

Metadata (the lazy form of 9241ae3)
-----------------------------------
get_mla_metadata(*args, **kwargs) ignores its arguments and returns
(FlashMLASchedMeta(), None). The first flash_mla_with_kvcache call that receives the
object fills `config` (FlashMLA's fields) and allocates OpenMLA's workspace (a
uint8 tensor: schedule records, scheduler scratch, split accumulators), kept on
the object beside the dataclass fields (attribute `_openmla_workspace`). Later
calls with the same object (every layer of a step) check their arguments against
`config` and reuse the workspace. `tile_scheduler_metadata` and `num_splits` are
left to the caller: a [1, 8] tensor put there (vLLM's batch-invariant mode) makes
the calls run in OpenMLA's batch-invariant mode (docs/batch_invariance.md: each request's
out and LSE bitwise independent of the rest of the batch, still spread over the SMs), as
does OPENMLA_BATCH_INVARIANT=1 or VLLM_BATCH_INVARIANT=1 in the environment at import.
Dense and sparse calls, like FlashMLA's, reuse the schedule (built on the device from
cache_seqlens or topk_length) that the object's first call built, as long as the shapes,
the workspace, the stream and the lengths tensor (object and torch version) are those of
that call (openmla/_eager.py, "Schedule reuse"); anything else rebuilds it. Eager calls
reuse only an eager build of an object never captured in a CUDA graph; captured calls
reuse only a build captured earlier in the same capture, so every replay rebuilds the
schedule once from its own lengths before the layers that read it. So, as with FlashMLA,
use one object per set of lengths (per decode step): a change to the lengths that torch
does not count (an inference tensor written in place) is not seen.

For the older tensor form, where get_mla_metadata(cache_seqlens, ...) returns
(tile_scheduler_metadata, num_splits) tensors, import openmla.flash_mla_tensor_metadata.

What is not there
-----------------
- extra_k_cache / extra_indices_in_kvcache / extra_topk_length (the second cache of
  FlashMLA's d_qk = 512 model family) raise NotImplementedError naming the argument.
- Dense FP8 (is_fp8_kvcache=True without indices): 9241ae3 has no descale arguments.
  vLLM's dense FP8 entries are here under vLLM's names and signatures instead
  (from openmla.flash_mla_tensor_metadata, whose metadata are tensors):
  get_mla_metadata_dense_fp8(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)
  and flash_mla_with_kvcache_fp8(q, k_cache, block_table, cache_seqlens,
  head_dim_v, tile_scheduler_metadata, num_splits, softmax_scale=None,
  causal=False, descale_q=None, descale_k=None) -> (out, lse); e4m3 q and cache,
  bf16 out, on the GPU kernel with FP8 S = Q.K^T.
- flash_attn_varlen_func and its packed forms are FlashMLA's SM100 dense prefill:
  they exist so that imports work, and raise NotImplementedError.
- flash_mla_sparse_fwd also takes sparse decode's 656-byte FP8 cache as kv
  ([num_pages, page_size, 1, 656], 1-byte dtype), read in place, and any h_q from 1 to 128.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Tuple

import torch

import openmla
from openmla import _eager
from openmla._api import _sparse_prefill
from openmla._tensors import check_sm_scale, d_v_arg, softmax_scale_arg
# vLLM's dense FP8 names (tensor metadata), re-exported with their signatures.
from openmla.flash_mla_tensor_metadata import flash_mla_with_kvcache_fp8, get_mla_metadata_dense_fp8

__version__ = openmla.__version__

__all__ = [
    "FlashMLASchedMeta",
    "get_mla_metadata",
    "flash_mla_with_kvcache",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_mla_sparse_fwd",
    "get_mla_metadata_dense_fp8",
    "flash_mla_with_kvcache_fp8",
]

_ENTRY = "flash_mla_with_kvcache"
# Where a FlashMLASchedMeta keeps OpenMLA's workspace (an attribute beside the dataclass fields).
_WORKSPACE_SLOT = "_openmla_workspace"
# openmla's argument names -> FlashMLA's, for messages from the C++ checks.
_NAMES = {"kv_cache": "k_cache", "seqlens": "cache_seqlens", "workspace": "tile_scheduler_metadata",
          "d_v": "head_dim_v", "softmax_scale": "softmax_scale"}
_DENSE = _eager.DENSE.renamed(_ENTRY, _NAMES)
_SPARSE = _eager.SPARSE.renamed(_ENTRY, _NAMES)
_PREFILL = _eager.PREFILL.renamed("flash_mla_sparse_fwd", {"softmax_scale": "sm_scale"})


@dataclasses.dataclass
class FlashMLASchedMeta:
    """What get_mla_metadata() returns; flash_mla_with_kvcache fills it on first use.

    OpenMLA never writes tile_scheduler_metadata / num_splits; a caller-made
    tile_scheduler_metadata [1, 8] means no split (see the module docstring).
    """

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

        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False

    config: Optional[Config] = None

    tile_scheduler_metadata: Optional[torch.Tensor] = None  # None, or the caller's [1, 8] int32: no split
    num_splits: Optional[torch.Tensor] = None  # not read


def get_mla_metadata(*args, **kwargs) -> Tuple[FlashMLASchedMeta, None]:
    """(FlashMLASchedMeta(), None), whatever the arguments (accepted for callers of the older form)."""
    return FlashMLASchedMeta(), None


# ---------------------------------------------------------------------------
# Decode
# ---------------------------------------------------------------------------
def _unsupported(name: str, what: str) -> NotImplementedError:
    return NotImplementedError(f"{_ENTRY}: argument '{name}' is not supported: got a tensor, expected None "
                               f"({what})")


def _config_mismatch(meta: FlashMLASchedMeta, config: FlashMLASchedMeta.Config) -> ValueError:
    fields = [f.name for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(meta.config, f.name)]
    got = ", ".join(f"{name} = {getattr(config, name)}" for name in fields)
    expected = ", ".join(f"{name} = {getattr(meta.config, name)}" for name in fields)
    return ValueError(f"{_ENTRY}: argument 'tile_scheduler_metadata' was filled by a call with other arguments: "
                      f"got {got}, expected {expected} (use one get_mla_metadata() object per shape)")


def _check_arguments(q, k_cache, block_table, cache_seqlens, causal, is_fp8_kvcache, indices, attn_sink,
                     topk_length) -> None:
    """FlashMLA's rules for which arguments go together (sparse: indices; dense: block_table + cache_seqlens)."""
    if indices is not None:
        if causal:
            raise ValueError(f"{_ENTRY}: argument 'causal' must be False with indices (sparse attention): got "
                             "causal = True, expected False")
        if not is_fp8_kvcache:
            raise ValueError(f"{_ENTRY}: argument 'is_fp8_kvcache' must be True with indices (sparse attention "
                             "reads the 656-byte FP8 cache): got False, expected True")
        return
    for name, value in (("attn_sink", attn_sink), ("topk_length", topk_length)):
        if value is not None:
            raise ValueError(f"{_ENTRY}: argument '{name}' needs indices (sparse attention): got a tensor with "
                             "indices = None, expected None")
    for name, value in (("block_table", block_table), ("cache_seqlens", cache_seqlens)):
        if value is None:
            raise ValueError(f"{_ENTRY}: argument '{name}' is missing: got None, expected a tensor for dense "
                             "attention (indices = None)")
    if is_fp8_kvcache:
        raise NotImplementedError(
            f"{_ENTRY}: argument 'is_fp8_kvcache' is not supported without indices: got is_fp8_kvcache = True "
            f"with k_cache.dtype = {k_cache.dtype}, expected False (dense FP8 needs descale factors, which this API "
            "lacks: use openmla.flash_mla_tensor_metadata.flash_mla_with_kvcache_fp8)")


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    cache_seqlens: Optional[torch.Tensor],
    head_dim_v: int,
    tile_scheduler_metadata: FlashMLASchedMeta,
    num_splits: None = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's decode: dense (block_table + cache_seqlens) or sparse (indices).

    q [b, s_q, h_q, d]. Dense: k_cache [num_blocks, page_block_size, h_k, d] of q's
    dtype (bf16/fp16), causal optional. Sparse: k_cache [num_blocks,
    page_block_size, 1, 656] bytes with is_fp8_kvcache=True, indices [b, s_q, topk]
    int32 (block * page_block_size + offset; -1 skips), optional topk_length [b]
    int32 and attn_sink [h_q] fp32; block_table and cache_seqlens are not read (as
    in FlashMLA, they may be None). tile_scheduler_metadata: from get_mla_metadata(),
    one per step, shared by the layers. Returns out [b, s_q, h_q, head_dim_v] and
    lse [b, h_q, s_q] float32.
    """
    meta = tile_scheduler_metadata
    if not isinstance(meta, FlashMLASchedMeta):
        raise TypeError(f"{_ENTRY}: argument 'tile_scheduler_metadata' has an unsupported type: got "
                        f"{type(meta).__name__}, expected the FlashMLASchedMeta of get_mla_metadata() (for "
                        "metadata tensors, import openmla.flash_mla_tensor_metadata)")
    if num_splits is not None:
        raise ValueError(f"{_ENTRY}: argument 'num_splits' must be None: got {type(num_splits).__name__}, "
                         "expected None (the metadata object holds everything)")
    if extra_k_cache is not None:
        raise _unsupported("extra_k_cache", "OpenMLA has no second KV cache (FlashMLA's d_qk = 512 models)")
    if extra_indices_in_kvcache is not None:
        raise _unsupported("extra_indices_in_kvcache", "OpenMLA has no second KV cache")
    if extra_topk_length is not None:
        raise _unsupported("extra_topk_length", "OpenMLA has no second KV cache")
    # Shapes read below, named before anything is read or allocated from them.
    for name, tensor in (("q", q), ("k_cache", k_cache)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4:
            got = f"{name}.shape = {list(tensor.shape)}" if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{_ENTRY}: argument '{name}' has the wrong number of dimensions: got {got}, expected 4 "
                             "dimensions")
    if indices is not None and (not isinstance(indices, torch.Tensor) or indices.dim() != 3):
        raise ValueError(f"{_ENTRY}: argument 'indices' has the wrong number of dimensions: expected 3 dimensions "
                         "[batch, s_q, topk]")
    head_dim_v = d_v_arg(_ENTRY, head_dim_v, "head_dim_v")
    softmax_scale = softmax_scale_arg(_ENTRY, q, softmax_scale)

    # ---- the metadata object: filled on first use, then checked (shapes only) ----
    topk = indices.shape[-1] if indices is not None else None
    signature = (q.shape[:3], k_cache.shape[1:3], causal, is_fp8_kvcache, topk)
    if not meta.have_initialized:
        _check_arguments(q, k_cache, block_table, cache_seqlens, causal, is_fp8_kvcache, indices, attn_sink,
                         topk_length)
        meta.config = FlashMLASchedMeta.Config(q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1],
                                               k_cache.shape[2], causal, is_fp8_kvcache, topk, None, None)
        meta.have_initialized = True
        meta.__dict__["_openmla_signature"] = signature
    elif meta.__dict__.get("_openmla_signature") != signature:
        config = FlashMLASchedMeta.Config(q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1], k_cache.shape[2],
                                          causal, is_fp8_kvcache, topk, None, None)
        if config != meta.config:
            raise _config_mismatch(meta, config)
        meta.__dict__["_openmla_signature"] = signature
    elif indices is None and (attn_sink is not None or topk_length is not None or block_table is None
                              or cache_seqlens is None):
        # Same shapes as the call that filled the object, so the argument rules held then; the presence
        # of the dense arguments is all that can change (nothing passed is silently ignored).
        _check_arguments(q, k_cache, block_table, cache_seqlens, causal, is_fp8_kvcache, indices, attn_sink,
                         topk_length)

    # A caller-made tile_scheduler_metadata [1, 8] (vLLM's batch-invariant mode) or the environment
    # (_BATCH_INVARIANT) asks that a request's result not depend on its batch: OpenMLA's batch-invariant
    # mode (fixed chunks per request, docs/batch_invariance.md), which keeps the SMs busy, rather than the
    # single SM part the [1, 8] tensor stands for in FlashMLA.
    batch_invariant = _BATCH_INVARIANT or _caller_parts(meta.tile_scheduler_metadata) == 1
    eager = _eager.applies(q)
    if indices is not None:
        # ---- sparse decode over the 656-byte FP8 cache ----
        if eager:
            return _eager.sparse_decode(q, k_cache, indices, None, topk_length, attn_sink, float(softmax_scale),
                                        int(head_dim_v), 0, 0, 0, None, _SPARSE, meta, _WORKSPACE_SLOT,
                                        batch_invariant)
        _eager.forget_schedule(meta)  # the op writes the object's workspace without a record
        return torch.ops.openmla.sparse_decode(q, k_cache, indices, meta.__dict__.get(_WORKSPACE_SLOT), topk_length,
                                               attn_sink, float(softmax_scale), int(head_dim_v), 0, 0, 0,
                                               batch_invariant)

    # ---- dense decode ----
    if eager:
        return _eager.dense_decode(q, k_cache, block_table, cache_seqlens, None, None, None, float(softmax_scale),
                                   bool(causal), int(head_dim_v), 0, 0, 0, None, _DENSE, meta,
                                   _WORKSPACE_SLOT, batch_invariant, reuse_schedule=True)
    # torch.compile: a workspace filled by an eager call, else the op allocates one per call.
    _eager.forget_schedule(meta)  # the op writes the object's workspace without a record
    return torch.ops.openmla.dense_decode(q, k_cache, block_table, cache_seqlens, meta.__dict__.get(_WORKSPACE_SLOT),
                                          None, None, float(softmax_scale), bool(causal), int(head_dim_v), 0,
                                          0, 0, batch_invariant)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() not in ("", "0", "false", "no", "off")


# Batch-invariant mode for every call of this module: OPENMLA_BATCH_INVARIANT=1, or vLLM's own
# VLLM_BATCH_INVARIANT=1 (read once, at import).
_BATCH_INVARIANT = _env_flag("OPENMLA_BATCH_INVARIANT") or _env_flag("VLLM_BATCH_INVARIANT")


def _caller_parts(tile_scheduler_metadata) -> int:
    """1 (no split) for a caller-made [1, 8] metadata tensor, else 0 (the planner decides)."""
    if isinstance(tile_scheduler_metadata, torch.Tensor) and tile_scheduler_metadata.dim() == 2 and \
            tile_scheduler_metadata.shape[0] == 1:
        return 1
    return 0


# ---------------------------------------------------------------------------
# Sparse prefill
# ---------------------------------------------------------------------------
def flash_mla_sparse_fwd(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    d_v: int = 512,
    attn_sink: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashMLA's sparse prefill: q [s_q, h_q, d_qk] bf16, kv [s_kv, 1, d_qk] bf16, indices [s_q, 1, topk] int32.

    Returns (out [s_q, h_q, d_v] bf16, max_logits [s_q, h_q] fp32, lse [s_q, h_q] fp32).
    Beyond FlashMLA: kv may be the 656-byte FP8 cache [num_pages, page_size, 1, 656] (indices =
    page * page_size + offset), read in place. CPU tensors run the C++ reference.
    sm_scale is required (FlashMLA has no default).
    """
    check_sm_scale(_PREFILL.name, sm_scale)
    return _sparse_prefill(_PREFILL, q, kv, indices, sm_scale, topk_length, attn_sink, d_v, None, _BATCH_INVARIANT)


# ---------------------------------------------------------------------------
# Dense MHA prefill (FlashMLA's SM100 kernels): names only
# ---------------------------------------------------------------------------
def _no_dense_prefill(entry: str) -> NotImplementedError:
    return NotImplementedError(
        f"{entry}: dense MHA prefill is not implemented by OpenMLA (FlashMLA runs it on SM100 only; on Hopper "
        "use FlashAttention's flash_attn_varlen_func)")


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_qo: torch.Tensor,
    cu_seqlens_kv: torch.Tensor,
    max_seqlen_qo: int,
    max_seqlen_kv: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    deterministic: bool = False,
    is_varlen: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's SM100 dense prefill: raises NotImplementedError."""
    raise _no_dense_prefill("flash_attn_varlen_func")


def flash_attn_varlen_qkvpacked_func(
    qkv: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    head_dim_qk: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    deterministic: bool = False,
    is_varlen: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's SM100 dense prefill (packed q, k, v): raises NotImplementedError."""
    raise _no_dense_prefill("flash_attn_varlen_qkvpacked_func")


def flash_attn_varlen_kvpacked_func(
    q: torch.Tensor,
    kv: torch.Tensor,
    cu_seqlens_qo: torch.Tensor,
    cu_seqlens_kv: torch.Tensor,
    max_seqlen_qo: int,
    max_seqlen_kv: int,
    head_dim_qk: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    deterministic: bool = False,
    is_varlen: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's SM100 dense prefill (packed k, v): raises NotImplementedError."""
    raise _no_dense_prefill("flash_attn_varlen_kvpacked_func")
