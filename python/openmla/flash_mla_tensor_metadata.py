"""FlashMLA's older Python API, where the metadata are tensors, on OpenMLA.

    from openmla.flash_mla_tensor_metadata import get_mla_metadata, flash_mla_with_kvcache

This is the form that vllm-project/FlashMLA (46d64a8) and SGLang's sgl_kernel
expose: get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k,
num_heads_q=None, is_fp8_kvcache=False, topk=None) returns
(tile_scheduler_metadata [num_sm_parts, 8] int32, num_splits [b + 1] int32), and
the caller passes both to every layer's flash_mla_with_kvcache, copying them into
fixed CUDA-graph buffers each step. The module is named for that difference from
openmla.flash_mla (FlashMLA 9241ae3, where the metadata is a lazily filled
object); a caller picks the form by the import, never by the arguments. vLLM's
dense FP8 names (get_mla_metadata_dense_fp8, flash_mla_with_kvcache_fp8) and
SGLang's (get_mla_decoding_metadata_dense_fp8) are here too.

How the metadata tensors map onto OpenMLA
-----------------------------------------
OpenMLA needs no host-side schedule: each call rebuilds it on the device from
cache_seqlens (or the indices) inside a workspace whose size depends on shapes
only. So the two tensors are real tensors of FlashMLA's shapes and dtypes, on
cache_seqlens' device, but nothing reads their contents (they are zeros):

- tile_scheduler_metadata [num_sm_parts, 8] int32, num_sm_parts counted as FlashMLA
  counts it (SMs / h_k / ceil(num_q_tokens_per_head_k / 64), at least 1), so it is
  the same for every batch size and buffers made once take every step's copy. A
  [1, 8] tensor (FlashMLA's count when it would not split, or one the caller made,
  as vLLM's batch-invariant mode does) makes the call run without a split; any
  other count leaves OpenMLA's planner free.
- num_splits [b + 1] int32.

The workspace is held alongside: the first flash_mla_with_kvcache call that
receives a given metadata tensor allocates the workspace for its shapes and keeps
it on that tensor object (attribute `_openmla_workspace`), so the layers of a step,
which all pass the same tensor, share one workspace and nothing is allocated per
call but the outputs. A copy of the tensor (a CUDA-graph buffer) gets its own
workspace on its first call, made during capture from the graph's memory pool, as
FlashMLA's own split accumulators are.

Differences that only widen what works: the tensors stay valid when the lengths
change (dense: the schedule is rebuilt on every call and every graph replay;
sparse calls here read no lengths, so the schedule depends on the shapes alone
and later eager calls with the same tensor reuse the one its first call built,
openmla/_eager.py "Schedule reuse"); the
contents may be anything (the shape stays [num_sm_parts, 8]: another is named).
Dense FP8 runs on CPU tensors (the C++ reference) only until OpenMLA's dense FP8
kernel exists; on CUDA tensors it raises NotImplementedError.
"""

from __future__ import annotations

import functools
import operator
from typing import Optional, Tuple

import torch

import openmla
from openmla import _eager
from openmla._api import _sparse_prefill
from openmla._plans import device_info
from openmla._tensors import check_devices, check_sm_scale, d_v_arg, softmax_scale_arg

__version__ = openmla.__version__

__all__ = [
    "get_mla_metadata",
    "get_mla_metadata_dense_fp8",
    "get_mla_decoding_metadata_dense_fp8",
    "flash_mla_with_kvcache",
    "flash_mla_with_kvcache_fp8",
    "flash_mla_sparse_fwd",
]

# Ints per SM part in FlashMLA's tile_scheduler_metadata.
TILE_SCHEDULER_METADATA_SIZE = 8
_WORKSPACE_SLOT = "_openmla_workspace"

# openmla's argument names -> the ones of this API, for messages from the C++ checks.
_NAMES = {"kv_cache": "k_cache", "seqlens": "cache_seqlens", "workspace": "tile_scheduler_metadata",
          "d_v": "head_dim_v", "q_scale": "descale_q", "kv_scale": "descale_k"}


# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------
# Query rows one SM part covers in FlashMLA's count of parts.
_ROWS_PER_PART = 64


@functools.lru_cache(maxsize=256)
def _num_sm_parts(device: torch.device, rows_per_head_k: int, h_k: int) -> int:
    """FlashMLA's part count: SMs / h_k / ceil(rows / 64), at least 1; it does not depend on the batch.

    Engines copy each step's metadata into a buffer made once (SGLang copies the whole tensor), so
    the row count must stay the same for every batch size.
    """
    num_sms = device_info(device).num_sms
    return max(1, num_sms // h_k // -(-rows_per_head_k // _ROWS_PER_PART))


def _metadata(entry: str, cache_seqlens: torch.Tensor, num_q_tokens_per_head_k: int, num_heads_k: int,
              num_heads_q: Optional[int], is_fp8_kvcache: bool, topk: Optional[int]) -> Tuple[torch.Tensor,
                                                                                              torch.Tensor]:
    if not isinstance(cache_seqlens, torch.Tensor):
        raise TypeError(f"{entry}: argument 'cache_seqlens' must be a tensor: got cache_seqlens of type "
                        f"{type(cache_seqlens).__name__}, expected a torch.Tensor [batch] int32")
    if cache_seqlens.dim() != 1:
        raise ValueError(f"{entry}: argument 'cache_seqlens' has the wrong number of dimensions: got "
                         f"cache_seqlens.shape = {list(cache_seqlens.shape)}, expected 1 dimension [batch]")
    check_devices(entry, (("cache_seqlens", cache_seqlens),))
    for name, value in (("num_q_tokens_per_head_k", num_q_tokens_per_head_k), ("num_heads_k", num_heads_k),
                        ("num_heads_q", num_heads_q)):
        if value is None and name == "num_heads_q":
            continue
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{entry}: argument '{name}' must be an int: got {name} = {value!r} "
                            f"({type(value).__name__}), expected an int") from None
        if value < 1:
            raise ValueError(f"{entry}: argument '{name}' is too small: got {name} = {value}, expected {name} >= 1")
    if topk is not None and num_heads_q is None:
        raise ValueError(f"{entry}: argument 'num_heads_q' is missing: got None, expected the number of query "
                         "heads when topk is given (sparse attention)")
    device = cache_seqlens.device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    batch = cache_seqlens.shape[0]
    parts = _num_sm_parts(device, int(num_q_tokens_per_head_k), int(num_heads_k))
    tile_scheduler_metadata = torch.zeros((parts, TILE_SCHEDULER_METADATA_SIZE), dtype=torch.int32, device=device)
    num_splits = torch.zeros(batch + 1, dtype=torch.int32, device=device)
    return tile_scheduler_metadata, num_splits


def get_mla_metadata(
    cache_seqlens: torch.Tensor,
    num_q_tokens_per_head_k: int,
    num_heads_k: int,
    num_heads_q: Optional[int] = None,
    is_fp8_kvcache: bool = False,
    topk: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(tile_scheduler_metadata [num_sm_parts, 8] int32, num_splits [b + 1] int32) on cache_seqlens' device.

    num_q_tokens_per_head_k = s_q * h_q // h_k; num_heads_q is needed with topk
    (sparse). The contents are not read (see the module docstring); the shapes
    are FlashMLA's.
    """
    return _metadata("get_mla_metadata", cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q,
                     is_fp8_kvcache, topk)


def get_mla_metadata_dense_fp8(
    cache_seqlens: torch.Tensor,
    num_q_tokens_per_head_k: int,
    num_heads_k: int,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM's name for the dense FP8 metadata: as get_mla_metadata(..., is_fp8_kvcache=True)."""
    return _metadata("get_mla_metadata_dense_fp8", cache_seqlens, num_q_tokens_per_head_k, num_heads_k, None,
                     True, None)


def get_mla_decoding_metadata_dense_fp8(
    cache_seqlens: torch.Tensor,
    num_q_tokens_per_head_k: int,
    num_heads_k: int,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """SGLang's name for the dense FP8 metadata: as get_mla_metadata(..., is_fp8_kvcache=True)."""
    return _metadata("get_mla_decoding_metadata_dense_fp8", cache_seqlens, num_q_tokens_per_head_k, num_heads_k,
                     None, True, None)


# ---------------------------------------------------------------------------
# Decode
# ---------------------------------------------------------------------------
def _check_metadata(entry: str, tile_scheduler_metadata, num_splits) -> int:
    """max_parts for the run: 1 (no split) for a [1, 8] tile_scheduler_metadata, else 0 (the planner decides).

    The contents are never read, but the shape is FlashMLA's [num_sm_parts, 8]: anything else is not what
    get_mla_metadata() made, so it is named instead of being taken for a workspace or ignored.
    """
    if not isinstance(tile_scheduler_metadata, torch.Tensor):
        raise TypeError(f"{entry}: argument 'tile_scheduler_metadata' has an unsupported type: got "
                        f"{type(tile_scheduler_metadata).__name__}, expected the int32 tensor of get_mla_metadata() "
                        "(for FlashMLASchedMeta objects, import openmla.flash_mla)")
    if num_splits is not None and not isinstance(num_splits, torch.Tensor):
        raise TypeError(f"{entry}: argument 'num_splits' has an unsupported type: got {type(num_splits).__name__}, "
                        "expected the int32 tensor of get_mla_metadata()")
    shape = tile_scheduler_metadata.shape
    if len(shape) != 2 or shape[1] != TILE_SCHEDULER_METADATA_SIZE or shape[0] < 1:
        raise ValueError(f"{entry}: argument 'tile_scheduler_metadata' has the wrong shape: got "
                         f"tile_scheduler_metadata.shape = {list(shape)}, expected [num_sm_parts, "
                         f"{TILE_SCHEDULER_METADATA_SIZE}] (from get_mla_metadata())")
    # A [1, 8] metadata (FlashMLA's count when it would not split, or a caller's, as vLLM's batch-invariant
    # mode makes) means no split; any other count leaves the planner free.
    return 1 if shape[0] == 1 else 0


def _entries(name: str) -> Tuple[_eager.Entry, _eager.Entry]:
    """(dense, sparse) message naming for the public entry `name`."""
    return (_eager.DENSE.renamed(name, _NAMES), _eager.SPARSE.renamed(name, _NAMES))


_PREFILL = _eager.PREFILL.renamed("flash_mla_sparse_fwd", {"softmax_scale": "sm_scale"})
_WITH_KVCACHE = _entries("flash_mla_with_kvcache")
_WITH_KVCACHE_FP8 = _entries("flash_mla_with_kvcache_fp8")


def _decode(entries: Tuple[_eager.Entry, _eager.Entry], q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
            num_splits, softmax_scale, causal, descale_q, descale_k, is_fp8_kvcache, indices):
    name = entries[0].name
    max_parts = _check_metadata(name, tile_scheduler_metadata, num_splits)
    # The defaults and d_v named before anything is read from q or allocated (q's rank: the C++ checks).
    softmax_scale = softmax_scale_arg(name, q, softmax_scale)
    head_dim_v = d_v_arg(name, head_dim_v, "head_dim_v")
    eager = _eager.applies(q)
    if indices is not None:
        # ---- sparse decode over the 656-byte FP8 cache ----
        if causal:
            raise ValueError(f"{name}: argument 'causal' must be False with indices (sparse attention): got "
                             "causal = True, expected False")
        if not is_fp8_kvcache:
            raise ValueError(f"{name}: argument 'is_fp8_kvcache' must be True with indices (sparse attention "
                             "reads the 656-byte FP8 cache): got False, expected True")
        for arg, value in (("descale_q", descale_q), ("descale_k", descale_k)):
            if value is not None:
                raise ValueError(f"{name}: argument '{arg}' is not used by sparse attention (its cache carries "
                                 "per-tile scales): got a tensor, expected None")
        if eager:
            return _eager.sparse_decode(q, k_cache, indices, None, None, None, float(softmax_scale),
                                        int(head_dim_v), 0, max_parts, 0, None,
                                        entries[1], tile_scheduler_metadata, _WORKSPACE_SLOT)
        return torch.ops.openmla.sparse_decode(q, k_cache, indices, None, None, None, float(softmax_scale),
                                               int(head_dim_v), 0, max_parts, 0)

    # ---- dense decode (BF16/FP16; FP8 with descale_q / descale_k) ----
    for arg, value in (("block_table", block_table), ("cache_seqlens", cache_seqlens)):
        if value is None:
            raise ValueError(f"{name}: argument '{arg}' is missing: got None, expected a tensor for dense "
                             "attention (indices = None)")
    if (descale_q is None) != (descale_k is None):
        missing = "descale_k" if descale_k is None else "descale_q"
        raise ValueError(f"{name}: argument '{missing}' is missing: got None, expected descale_q and descale_k "
                         "both given (FP8) or both None")
    if descale_q is not None and q.dtype != torch.float8_e4m3fn:
        raise ValueError(f"{name}: argument 'descale_q' is for FP8 inputs: got a tensor with q.dtype = {q.dtype}, "
                         "expected None (or q in torch.float8_e4m3fn)")
    if is_fp8_kvcache and k_cache.dtype not in (torch.uint8, torch.float8_e4m3fn):
        # The cache's dtype decides what runs: the flag would be silently ignored.
        raise ValueError(f"{name}: argument 'is_fp8_kvcache' does not match k_cache: got is_fp8_kvcache = True "
                         f"with k_cache.dtype = {k_cache.dtype}, expected an FP8 cache (float8_e4m3fn or uint8) "
                         "or is_fp8_kvcache = False")
    if k_cache.dtype == torch.uint8 and (is_fp8_kvcache or descale_k is not None):
        k_cache = k_cache.view(torch.float8_e4m3fn)
    if eager:
        return _eager.dense_decode(q, k_cache, block_table, cache_seqlens, None, descale_q, descale_k,
                                   float(softmax_scale), bool(causal), int(head_dim_v), 0, max_parts, 0, None,
                                   entries[0], tile_scheduler_metadata, _WORKSPACE_SLOT)
    return torch.ops.openmla.dense_decode(q, k_cache, block_table, cache_seqlens, None, descale_q, descale_k,
                                          float(softmax_scale), bool(causal), int(head_dim_v), 0, max_parts, 0)


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    head_dim_v: int,
    tile_scheduler_metadata: torch.Tensor,
    num_splits: torch.Tensor,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    descale_q: Optional[torch.Tensor] = None,
    descale_k: Optional[torch.Tensor] = None,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Decode with tensor metadata: dense (block_table + cache_seqlens) or sparse (indices).

    q [b, s_q, h_q, d]; dense: k_cache [num_blocks, page_block_size, h_k, d] of q's
    dtype (FP8: float8_e4m3fn q and cache, descale_q / descale_k [1] fp32); sparse:
    k_cache [num_blocks, page_block_size, 1, 656] bytes with is_fp8_kvcache=True,
    indices [b, s_q, topk] int32. Returns out [b, s_q, h_q, head_dim_v] (bf16 for
    FP8) and lse [b, h_q, s_q] float32.
    """
    return _decode(_WITH_KVCACHE, q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                   num_splits, softmax_scale, causal, descale_q, descale_k, is_fp8_kvcache, indices)


def flash_mla_with_kvcache_fp8(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    head_dim_v: int,
    tile_scheduler_metadata: torch.Tensor,
    num_splits: torch.Tensor,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    descale_q: Optional[torch.Tensor] = None,
    descale_k: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM's dense FP8 decode: q and k_cache float8_e4m3fn [.., 576], descale_q / descale_k [1] fp32, bf16 out."""
    return _decode(_WITH_KVCACHE_FP8, q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                   num_splits, softmax_scale, causal, descale_q, descale_k, True, None)


def flash_mla_sparse_fwd(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    d_v: int = 512,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse prefill: q [s_q, h_q, d_qk] bf16, kv [s_kv, 1, d_qk] bf16, indices [s_q, 1, topk] int32.

    Returns (out [s_q, h_q, d_v] bf16, max_logits [s_q, h_q] fp32, lse [s_q, h_q] fp32).
    sm_scale is required (FlashMLA has no default).
    """
    check_sm_scale(_PREFILL.name, sm_scale)
    return _sparse_prefill(_PREFILL, q, kv, indices, sm_scale, None, None, d_v, None)
