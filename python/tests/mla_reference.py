"""float32 torch references for the tests, and builders of random MLA inputs.

Independent of the C++ reference: plain gathers, einsum and logsumexp.
Conventions (include/openmla/params.h): LSE in natural log; an empty row gives out 0 and
lse +inf (max_logits -inf); attn_sink scales out by 1 / (1 + exp(sink - lse)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

INF = float("inf")
D_QK, D_V, TOKEN_BYTES = 576, 512, 656


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------
def assert_attention_close(out, lse, out_ref, lse_ref, *, rel_l2=1e-2, lse_atol=2e-3, max_logits=None,
                           max_logits_ref=None):
    """rel-L2 on out, LSE separately, inf/NaN positions exactly; empty rows exactly 0."""
    out32, lse32 = out.float().cpu(), lse.float().cpu()
    out_ref, lse_ref = out_ref.float().cpu(), lse_ref.float().cpu()
    assert out32.shape == out_ref.shape, (out32.shape, out_ref.shape)
    assert lse32.shape == lse_ref.shape, (lse32.shape, lse_ref.shape)
    assert not torch.isnan(out32).any(), "out has NaN"
    assert torch.equal(torch.isnan(lse32), torch.isnan(lse_ref)), "lse NaN positions differ"
    assert torch.equal(torch.isposinf(lse32), torch.isposinf(lse_ref)), "lse +inf positions differ"
    assert torch.equal(torch.isneginf(lse32), torch.isneginf(lse_ref)), "lse -inf positions differ"
    finite = torch.isfinite(lse_ref)
    if finite.any():
        assert (lse32[finite] - lse_ref[finite]).abs().max().item() <= lse_atol
    denom = out_ref.norm().item()
    if denom > 0:
        err = (out32 - out_ref).norm().item() / denom
        assert err <= rel_l2, f"rel-L2 error {err:.3e} > {rel_l2:.1e}"
    else:
        assert out32.abs().max().item() == 0
    if max_logits is not None:
        ml, ml_ref = max_logits.float().cpu(), max_logits_ref.float().cpu()
        assert torch.equal(torch.isneginf(ml), torch.isneginf(ml_ref))
        fin = torch.isfinite(ml_ref)
        if fin.any():
            assert (ml[fin] - ml_ref[fin]).abs().max().item() <= lse_atol


# ---------------------------------------------------------------------------
# One query row set over a key set
# ---------------------------------------------------------------------------
def attend(q: torch.Tensor, k: torch.Tensor, scale: float, d_v: int, sink: Optional[torch.Tensor] = None):
    """q [h, d], k [m, d] -> out [h, d_v], lse [h], max_logits [h]."""
    h = q.shape[0]
    if k.shape[0] == 0:
        return torch.zeros(h, d_v), torch.full((h,), INF), torch.full((h,), -INF)
    scores = (q @ k.T) * scale
    lse = torch.logsumexp(scores, -1)
    out = torch.exp(scores - lse[:, None]) @ k[:, :d_v]
    if sink is not None:
        out = out * torch.sigmoid(lse - sink)[:, None]  # exp(lse) / (exp(lse) + exp(sink))
    return out, lse, scores.max(-1).values


# ---------------------------------------------------------------------------
# Dense decode
# ---------------------------------------------------------------------------
def dense_decode_ref(q, kv_cache, block_table, seqlens, softmax_scale, causal=False, d_v=D_V, q_scale=None,
                     kv_scale=None):
    q, kv_cache = q.cpu(), kv_cache.cpu()
    block_table, seqlens = block_table.cpu(), seqlens.cpu()
    qf = q.float() * (q_scale.float().cpu()[0] if q_scale is not None else 1.0)
    kvf = kv_cache.float() * (kv_scale.float().cpu()[0] if kv_scale is not None else 1.0)
    b, s_q, h_q, d = q.shape
    _, page_size, h_kv, _ = kv_cache.shape
    heads_per_kv = h_q // h_kv
    out = torch.zeros(b, s_q, h_q, d_v)
    lse = torch.full((b, h_q, s_q), INF)
    for i in range(b):
        n = max(0, min(int(seqlens[i]), block_table.shape[1] * page_size))
        if n == 0:
            continue
        pages = block_table[i, : (n + page_size - 1) // page_size].long()
        keys = kvf[pages].reshape(-1, h_kv, d)[:n]  # [n, h_kv, d]
        for s in range(s_q):
            visible = min(n, max(0, n - s_q + s + 1)) if causal else n
            for g in range(h_kv):
                heads = slice(g * heads_per_kv, (g + 1) * heads_per_kv)
                o, l, _ = attend(qf[i, s, heads], keys[:visible, g], softmax_scale, d_v)
                out[i, s, heads] = o
                lse[i, heads, s] = l
    return out, lse


@dataclass
class DenseInputs:
    q: torch.Tensor
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seqlens: torch.Tensor


def make_dense_inputs(lengths, *, s_q=1, h_q=16, h_kv=1, page_size=64, d_qk=D_QK, dtype=torch.bfloat16,
                      extra_pages=2, seed=0, device="cpu", capacity=None) -> DenseInputs:
    """Random q / paged cache for seqlens = `lengths`; request i holds pages for
    capacity[i] tokens (default: its length). Pages and tokens beyond every
    capacity are NaN, and block-table entries past them are out of range."""
    gen = torch.Generator().manual_seed(seed)
    b = len(lengths)
    capacity = list(lengths) if capacity is None else list(capacity)
    pages_per_seq = [max(0, (n + page_size - 1) // page_size) for n in capacity]
    max_pages = max(1, max(pages_per_seq))
    num_pages = sum(pages_per_seq) + extra_pages
    kv = torch.randn(num_pages, page_size, h_kv, d_qk, generator=gen)
    poisoned = torch.ones(num_pages, page_size, dtype=torch.bool)
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.full((b, max_pages), 1 << 30, dtype=torch.int32)  # out of range past each sequence
    cursor = 0
    for i, n in enumerate(capacity):
        for p in range(pages_per_seq[i]):
            page = int(perm[cursor])
            cursor += 1
            table[i, p] = page
            used = min(page_size, n - p * page_size)
            poisoned[page, :used] = False
    kv[poisoned] = float("nan")
    q = torch.randn(b, s_q, h_q, d_qk, generator=gen)
    if dtype == torch.float8_e4m3fn:
        q, kv = q.clamp(-400, 400), kv.clamp(-400, 400)
    return DenseInputs(q.to(dtype).to(device), kv.to(dtype).to(device), table.to(device),
                       torch.tensor(lengths, dtype=torch.int32, device=device))


# ---------------------------------------------------------------------------
# The 656-byte sparse FP8 cache
# ---------------------------------------------------------------------------
def quantize_sparse_tokens(rows: torch.Tensor) -> torch.Tensor:
    """rows [n, 576] float -> [n, 656] uint8: 512 e4m3 (4 power-of-two scales), 4 fp32 scales, 64 bf16."""
    n = rows.shape[0]
    latent = rows[:, :512].float().reshape(n, 4, 128)
    amax = latent.abs().amax(-1)
    scale = torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(amax / 448.0))), torch.ones_like(amax))
    values = (latent / scale[..., None]).to(torch.float8_e4m3fn).reshape(n, 512).view(torch.uint8)
    scale_bytes = scale.float().contiguous().view(torch.uint8).reshape(n, 16)
    rope_bytes = rows[:, 512:].to(torch.bfloat16).contiguous().view(torch.uint8).reshape(n, 128)
    return torch.cat([values, scale_bytes, rope_bytes], dim=1)


def dequantize_sparse_tokens(tokens: torch.Tensor) -> torch.Tensor:
    """[n, 656] uint8 -> [n, 576] float32."""
    tokens = tokens.cpu().reshape(-1, TOKEN_BYTES)
    n = tokens.shape[0]
    values = tokens[:, :512].contiguous().view(torch.float8_e4m3fn).float().reshape(n, 4, 128)
    scale = tokens[:, 512:528].contiguous().view(torch.float32).reshape(n, 4)
    rope = tokens[:, 528:].contiguous().view(torch.bfloat16).float().reshape(n, 64)
    return torch.cat([(values * scale[..., None]).reshape(n, 512), rope], dim=1)


def sparse_decode_ref(q, kv_cache, indices, softmax_scale, topk_length=None, attn_sink=None, d_v=D_V):
    q, indices = q.cpu().float(), indices.cpu()
    b, s_q, h_q, _ = q.shape
    keys = dequantize_sparse_tokens(kv_cache.view(torch.uint8))  # [num_tokens, 576]
    sink = attn_sink.cpu().float() if attn_sink is not None else None
    out = torch.zeros(b, s_q, h_q, d_v)
    lse = torch.full((b, h_q, s_q), INF)
    topk = indices.shape[-1]
    for i in range(b):
        length = topk if topk_length is None else max(0, min(int(topk_length[i]), topk))
        for s in range(s_q):
            idx = indices[i, s, :length].long()
            idx = idx[(idx >= 0) & (idx < keys.shape[0])]
            o, l, _ = attend(q[i, s], keys[idx], softmax_scale, d_v, sink)
            out[i, s], lse[i, :, s] = o, l
    return out, lse


def sparse_prefill_ref(q, kv, indices, softmax_scale, topk_length=None, attn_sink=None, d_v=D_V):
    """kv: [s_kv, 1, d_qk] bf16, or the FP8 cache [num_pages, page_size, 1, 656] (dequantised here)."""
    if kv.dim() == 4 and kv.element_size() == 1:
        kv = dequantize_sparse_tokens(kv.view(torch.uint8)).unsqueeze(1)  # [num_tokens, 1, 576]
    q, kv, indices = q.cpu().float(), kv.cpu().float(), indices.cpu()
    s_q, h_q, _ = q.shape
    s_kv, topk = kv.shape[0], indices.shape[-1]
    sink = attn_sink.cpu().float() if attn_sink is not None else None
    out = torch.zeros(s_q, h_q, d_v)
    lse = torch.full((s_q, h_q), INF)
    max_logits = torch.full((s_q, h_q), -INF)
    for s in range(s_q):
        length = topk if topk_length is None else max(0, min(int(topk_length[s]), topk))
        idx = indices[s, 0, :length].long()
        idx = idx[(idx >= 0) & (idx < s_kv)]
        out[s], lse[s], max_logits[s] = attend(q[s], kv[idx, 0], softmax_scale, d_v, sink)
    return out, max_logits, lse


def random_indices(shape, num_tokens: int, *, invalid_fraction=0.1, seed=0) -> torch.Tensor:
    """int32 indices in [0, num_tokens) with about `invalid_fraction` of -1 / out-of-range entries."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, num_tokens, shape, generator=gen, dtype=torch.int32)
    bad = torch.rand(shape, generator=gen) < invalid_fraction
    out_of_range = torch.rand(shape, generator=gen) < 0.5
    idx[bad & out_of_range] = num_tokens + 7
    idx[bad & ~out_of_range] = -1
    return idx


def default_scale(d_qk: int = D_QK) -> float:
    return 1.0 / math.sqrt(d_qk)
