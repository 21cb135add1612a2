"""An engine's decode loop on OpenMLA, the way vLLM's FLASHMLA backend drives FlashMLA.

    python3 examples/vllm_pattern.py                   # GPU: eager steps, then a CUDA graph replayed with new lengths
    python3 examples/vllm_pattern.py --dialect tensor  # the older tensor-metadata form (SGLang, earlier vLLM)
    python3 examples/vllm_pattern.py --device cpu      # no GPU: the eager steps on the C++ reference

Per step the engine makes the metadata once (get_mla_metadata), and every one of
the 61 layers passes it to flash_mla_with_kvcache with its own KV cache. For
full CUDA graphs it keeps fixed buffers (q, block_table, cache_seqlens, and in
the tensor form the metadata tensors), warms up once, captures one step, and
before each replay copies the step's lengths (and metadata) into the buffers.
Every checked output is compared with a float32 attention written here in torch.
The only OpenMLA-specific line is the import.
"""

from __future__ import annotations

import argparse
import math

import torch

D_QK, D_V, PAGE = 576, 512, 64


def reference(q, kv_cache, block_table, seqlens, scale):
    """float32 MLA decode with a causal query block: out [b, s_q, h_q, D_V], lse [b, h_q, s_q]."""
    b, s_q, h_q, _ = q.shape
    out = torch.zeros(b, s_q, h_q, D_V, dtype=torch.float32, device=q.device)
    lse = torch.full((b, h_q, s_q), math.inf, dtype=torch.float32, device=q.device)
    for i in range(b):
        n = int(seqlens[i])
        if n == 0:
            continue
        keys = kv_cache[block_table[i, :(n + PAGE - 1) // PAGE].long()].reshape(-1, D_QK)[:n].float()
        for s in range(s_q):
            visible = n - s_q + s + 1
            if visible <= 0:
                continue
            scores = q[i, s].float() @ keys[:visible].T * scale  # [h_q, visible]
            lse[i, :, s] = torch.logsumexp(scores, dim=-1)
            out[i, s] = torch.softmax(scores, dim=-1) @ keys[:visible, :D_V]
    return out, lse


def check(name, out, lse, ref_out, ref_lse):
    rel = float((out.float() - ref_out).norm() / ref_out.norm().clamp_min(1e-6))
    finite = torch.isfinite(ref_lse)
    lse_err = float((lse[finite] - ref_lse[finite]).abs().max()) if finite.any() else 0.0
    same_inf = bool(torch.equal(torch.isinf(lse), torch.isinf(ref_lse)))
    assert rel < 1e-2 and lse_err < 2e-3 and same_inf, f"{name}: rel_l2 {rel:.2e}, lse err {lse_err:.2e}"
    return rel


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dialect", choices=["lazy", "tensor"], default="lazy",
                        help="lazy: openmla.flash_mla (FlashMLA 9241ae3, vLLM today); "
                             "tensor: openmla.flash_mla_tensor_metadata (SGLang, older vLLM)")
    parser.add_argument("--layers", type=int, default=61)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16, help="query heads per rank (DeepSeek-V3: 128 / TP)")
    parser.add_argument("--s-q", type=int, default=1, help="query tokens per sequence (>1: speculative decode)")
    parser.add_argument("--max-len", type=int, default=1024)
    parser.add_argument("--check-layers", type=int, default=3, help="layers compared with the reference per step")
    args = parser.parse_args(argv)
    device, layers, b, h_q, s_q = args.device, args.layers, args.batch, args.heads, args.s_q
    torch.manual_seed(0)

    # ---- the import is the whole switch (FlashMLA: `from flash_mla import ...`) ----
    if args.dialect == "lazy":
        from openmla.flash_mla import flash_mla_with_kvcache, get_mla_metadata
    else:
        from openmla.flash_mla_tensor_metadata import flash_mla_with_kvcache, get_mla_metadata

    # ---- the model's state: one paged KV cache per layer, one block table for all ----
    pages_per_seq = (args.max_len + PAGE - 1) // PAGE
    kv_caches = [torch.randn(b * pages_per_seq, PAGE, 1, D_QK, device=device).bfloat16() for _ in range(layers)]
    block_table = torch.randperm(b * pages_per_seq, device=device, dtype=torch.int32).view(b, pages_per_seq)
    scale = D_QK ** -0.5
    checked = sorted({0, layers // 2, layers - 1})[:args.check_layers]

    def metadata(seqlens):
        """What the backend's metadata builder does once per step."""
        if args.dialect == "lazy":
            return get_mla_metadata()  # (FlashMLASchedMeta, None): filled by layer 0's call
        return get_mla_metadata(seqlens, s_q * h_q // 1, 1)  # (tile_scheduler_metadata, num_splits)

    def step(queries, seqlens, table, meta):
        """One decode step: every layer reuses the step's metadata."""
        outputs = []
        for layer in range(layers):
            outputs.append(flash_mla_with_kvcache(queries[layer], kv_caches[layer], table, seqlens, D_V, *meta,
                                                  softmax_scale=scale, causal=True))
        return outputs

    def new_lengths():
        lengths = torch.randint(s_q, args.max_len + 1, (b,), dtype=torch.int32)
        lengths[0] = args.max_len  # a full one
        return lengths

    # ---- eager steps (prefill-sized batches, piecewise graphs and eager mode run like this) ----
    for step_index in range(2):
        seqlens = new_lengths().to(device)
        queries = torch.randn(layers, b, s_q, h_q, D_QK, device=device).bfloat16()
        outputs = step(queries, seqlens, block_table, metadata(seqlens))
        for layer in checked:
            check(f"eager step {step_index} layer {layer}", *outputs[layer],
                  *reference(queries[layer], kv_caches[layer], block_table, seqlens, scale))
    print(f"eager: {layers} layers x 2 steps ({args.dialect} metadata) match the reference")
    if device == "cpu":
        print("CUDA graph part skipped (no GPU)")
        return 0

    # ---- full CUDA graph: fixed buffers, warm-up, capture one step, replay with new lengths ----
    q_buffer = torch.randn(layers, b, s_q, h_q, D_QK, device=device).bfloat16()
    seqlens_buffer = torch.full((b,), args.max_len, dtype=torch.int32, device=device)
    table_buffer = block_table.clone()
    meta = metadata(seqlens_buffer)
    if args.dialect == "tensor":
        # The engine's graph buffers for the metadata, sized at capture; each step copies into them.
        meta = tuple(t.clone() for t in meta)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step(q_buffer, seqlens_buffer, table_buffer, meta)  # warm-up: fills the metadata, allocates its workspace
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_outputs = step(q_buffer, seqlens_buffer, table_buffer, meta)
    for replay in range(3):
        lengths = new_lengths()
        seqlens_buffer.copy_(lengths)
        q_buffer.copy_(torch.randn_like(q_buffer, dtype=torch.float32))
        if args.dialect == "tensor":
            for buffer, fresh in zip(meta, metadata(seqlens_buffer)):
                buffer.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        for layer in checked:
            check(f"replay {replay} layer {layer}", *graph_outputs[layer],
                  *reference(q_buffer[layer], kv_caches[layer], table_buffer, seqlens_buffer, scale))
    print(f"CUDA graph: one step of {layers} layers captured, 3 replays with new lengths match the reference")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
