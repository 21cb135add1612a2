#!/usr/bin/env python3
"""OpenMLA beside its peers, in one process: CUDA-graph replay, L2 flushed before every timed replay.

Times OpenMLA and, when importable, FlashMLA (`flash_mla`, its last Hopper version) and the vLLM fork's
dense FP8 kernel (`vllm_flashmla_fp8`, needs VLLM_FP8_EXT) on the same inputs, case by case:
  dense_long     b=128, s_k in {4096, 16384} (lengths ~ normal(s_k, s_k/2)), h_q in {16,32,64,128}, s_q in {1,2}
  dense_short    s_k=1024 (fixed), b in {1,32,128}, h_q in {16,128}, s_q in {1,4}
  sparse         656-byte FP8 cache, topk 2048, b in {64,128}, h_q in {64,128}, s_q in {1,2}
  sparse_narrow  h_q in {8,16,32} native against FlashMLA padded to 64 heads (as vLLM pads), b in {64,128}
                 (both groups: one 65536-token cache that every request reads: 43 MB, rows shared, L2-resident)
  sparse_hbm     (not in the default run) b=128, h_q in {8,16,32,64,128}, s_q in {1,2}: each request reads
                 its own 32768 tokens of a 2.75 GB cache (HBM, no row shared); h_q < 64 against padded FlashMLA
  long_query     b=4, h_q=128, s_k=4096, causal, s_q in {64,67,100,128,256,512,1024}; OpenMLA also
                 with one part (openmla_one_part: the plan before parts of whole requests)
  dense_fp8      dense_long/short shapes in FP8 beside the vLLM fork's dense FP8 kernel, + h_q=128 s_q>=67
  prefill        sparse prefill s_q=4096, topk 2048, d_qk 576 and 512, h_q 16 (OpenMLA only), 64, 128;
                 FP8-cache mode (OpenMLA only) at h_q 16, 64, 128
  engine_step    an engine's decode step: 8 layers (own q and cache each) in one graph through the FlashMLA API
                 (openmla.flash_mla beside flash_mla), one new metadata object per step, so each library builds
                 its schedule once per replay and the other layers reuse it; dense s_k=1024 b in {1,32,128},
                 h_q in {16,128}; sparse b in {64,128}, h_q in {64,128}; s_q = 1
Every case also checks that the libraries agree (rel-L2 of the outputs, where both ran).

usage: python3 bench/compare.py [--groups dense_long,sparse,...] [--filter TEXT] [--iters N]
                                [--json FILE] [--commit REV] [--schedule-placement 0|1|2]
Charts: python3 bench/plot.py FILE.json (a roofline and per-case bars, peers beside OpenMLA).
A/B of two builds (runs of each, alternating): python3 bench/ab_compare.py --new A1.json A2.json --old B1.json B2.json
speed = peer time / OpenMLA time (> 1: OpenMLA is faster).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch

D_QK, D_V, PAGE = 576, 512, 64
TOKEN_BYTES = 656  # the sparse FP8 cache row: 512 e4m3, 4 fp32 scales, 64 bf16 RoPE
FLOPS_PER_KEY = 2 * D_QK + 2 * D_V  # per query row and visible key


@dataclass
class Case:
    group: str
    name: str
    make: Callable[[], dict]            # builds the inputs once
    runners: Dict[str, Callable]        # library -> (inputs -> callable), None when it cannot run the case
    flops: Callable[[dict], float]
    bytes: Callable[[dict], float]
    results: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def lengths_around(b: int, s_k: int, spread: bool, gen: torch.Generator) -> torch.Tensor:
    if not spread:
        return torch.full((b,), s_k, dtype=torch.int32)
    lens = torch.normal(float(s_k), s_k / 2.0, (b,), generator=gen).round().clamp(1, 2 * s_k)
    return lens.to(torch.int32)


def dense_inputs(b, s_q, h_q, s_k, spread, causal, dtype=torch.bfloat16, seed=0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    seqlens = lengths_around(b, s_k, spread, gen)
    pages_per_seq = (int(seqlens.max()) + PAGE - 1) // PAGE
    num_pages = b * pages_per_seq
    cuda_gen = torch.Generator(device="cuda").manual_seed(seed)
    kv = torch.randn(num_pages, PAGE, 1, D_QK, generator=cuda_gen, device="cuda") * 0.5
    q = torch.randn(b, s_q, h_q, D_QK, generator=cuda_gen, device="cuda") * 0.5
    block_table = torch.randperm(num_pages, generator=gen).to(torch.int32).view(b, pages_per_seq).cuda()
    x = dict(q=q.to(dtype) if dtype != torch.float8_e4m3fn else q.to(dtype), kv=kv.to(dtype),
             block_table=block_table, seqlens=seqlens.cuda(), causal=causal, b=b, s_q=s_q, h_q=h_q,
             mean_len=float(seqlens.float().mean()), dtype=dtype)
    if dtype == torch.float8_e4m3fn:
        x["descale_q"] = torch.tensor([0.5], device="cuda")
        x["descale_k"] = torch.tensor([0.5], device="cuda")
    return x


def quantize_tokens(rows: torch.Tensor) -> torch.Tensor:
    """[n, 576] float -> [n, 656] uint8: 4 power-of-two scales over 128 latent values each, bf16 RoPE."""
    n = rows.shape[0]
    latent = rows[:, :512].view(n, 4, 128)
    amax = latent.abs().amax(dim=2).clamp_min(1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))
    codes = (latent / scale[:, :, None]).to(torch.float8_e4m3fn).view(torch.uint8).view(n, 512)
    out = torch.empty(n, TOKEN_BYTES, dtype=torch.uint8, device=rows.device)
    out[:, :512] = codes
    out[:, 512:528] = scale.to(torch.float32).contiguous().view(torch.uint8).view(n, 16)
    out[:, 528:] = rows[:, 512:].to(torch.bfloat16).contiguous().view(torch.uint8).view(n, 128)
    return out


def sparse_inputs(b, s_q, h_q, topk=2048, num_tokens=65536, seed=0, own_context=0) -> dict:
    """One cache of num_tokens tokens that every request reads (43 MB: L2-resident, rows shared by
    requests); or, with own_context > 0, a cache of b * own_context tokens of which each request reads only
    its own own_context (b = 128, 32768: 2.75 GB streamed from HBM, no row shared, as in serving
    without shared prefixes; the shape of openmla_bench's sparse cases)."""
    cuda_gen = torch.Generator(device="cuda").manual_seed(seed)
    context = own_context or num_tokens
    total = b * own_context if own_context else num_tokens
    cache = torch.empty(total, TOKEN_BYTES, dtype=torch.uint8, device="cuda")
    chunk = 1 << 18  # quantised a chunk at a time: the float rows of 4 M tokens would take 9.7 GB
    for first in range(0, total, chunk):
        n = min(chunk, total - first)
        cache[first:first + n] = quantize_tokens(torch.randn(n, D_QK, generator=cuda_gen, device="cuda") * 0.5)
    cache = cache.view(total // PAGE, PAGE, 1, TOKEN_BYTES)
    q = (torch.randn(b, s_q, h_q, D_QK, generator=cuda_gen, device="cuda") * 0.5).to(torch.bfloat16)
    # distinct random tokens per row: the topk smallest of random keys
    indices = torch.rand(b * s_q, context, generator=cuda_gen, device="cuda").topk(topk, dim=1).indices
    if own_context:  # row r belongs to request r // s_q
        indices += (torch.arange(b * s_q, device="cuda") // s_q * own_context)[:, None]
    return dict(q=q, cache=cache, indices=indices.to(torch.int32).view(b, s_q, topk), b=b, s_q=s_q,
                h_q=h_q, topk=topk)


def prefill_inputs(s_q, h_q, s_kv, topk=2048, d_qk=D_QK, fp8_cache=False, seed=0) -> dict:
    """fp8_cache: kv is the 656-byte paged cache (pages of 64) holding the same rows, quantised."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(s_q, h_q, d_qk, generator=gen, device="cuda") * 0.5).to(torch.bfloat16)
    kv = (torch.randn(s_kv, 1, d_qk, generator=gen, device="cuda") * 0.5).to(torch.bfloat16)
    if fp8_cache:
        kv = quantize_tokens(kv.view(s_kv, d_qk).float()).view(s_kv // PAGE, PAGE, 1, TOKEN_BYTES)
    indices = torch.rand(s_q, s_kv, generator=gen, device="cuda").topk(topk, dim=1).indices
    return dict(q=q, kv=kv, indices=indices.to(torch.int32).view(s_q, 1, topk), s_q=s_q, h_q=h_q, topk=topk,
                d_qk=d_qk, fp8_cache=fp8_cache)


# ---------------------------------------------------------------------------------------------
# Libraries: each returns a zero-argument callable for the case (planning done up front), or None
# ---------------------------------------------------------------------------------------------
def import_or_none(name):
    try:
        return __import__(name)
    except Exception as error:  # noqa: BLE001 - a peer that does not load is reported, not fatal
        print(f"# {name}: not available ({type(error).__name__}: {error})", file=sys.stderr)
        return None


openmla = import_or_none("openmla")
flash_mla = import_or_none("flash_mla")
vllm_fp8 = import_or_none("vllm_flashmla_fp8")

# PlanOptions.schedule_placement of OpenMLA's dense and sparse decode plans (--schedule-placement).
SCHEDULE_PLACEMENT = 0


def placement_kwargs() -> dict:
    # Passed only when asked for, so that builds before the keyword (A/B against an older main) still run.
    return {"schedule_placement": SCHEDULE_PLACEMENT} if SCHEDULE_PLACEMENT else {}


def openmla_dense(x, max_parts=0):
    if openmla is None:
        return None
    plan = openmla.DensePlan.for_tensors(x["q"], x["kv"], x["block_table"], max_parts=max_parts,
                                         **placement_kwargs())
    workspace = plan.alloc_workspace()
    kwargs = {}
    if x["dtype"] == torch.float8_e4m3fn:
        kwargs = dict(q_scale=x["descale_q"], kv_scale=x["descale_k"])
    return lambda: openmla.dense_decode(x["q"], x["kv"], x["block_table"], x["seqlens"], plan=plan,
                                        workspace=workspace, causal=x["causal"], **kwargs)


def flash_mla_dense(x):
    if flash_mla is None or x["dtype"] == torch.float8_e4m3fn:
        return None
    meta, _ = flash_mla.get_mla_metadata()
    return lambda: flash_mla.flash_mla_with_kvcache(x["q"], x["kv"], x["block_table"], x["seqlens"], D_V, meta,
                                                    causal=x["causal"])


def fork_dense_fp8(x):
    if vllm_fp8 is None or x["dtype"] != torch.float8_e4m3fn:
        return None
    if x["h_q"] == 128 and x["s_q"] >= 67:
        return None  # its metadata kernel asserts there (0 SM parts) and kills the process
    meta, splits = vllm_fp8.get_mla_metadata_dense_fp8(x["seqlens"], x["s_q"] * x["h_q"], 1)
    return lambda: vllm_fp8.flash_mla_with_kvcache_fp8(x["q"], x["kv"], x["block_table"], x["seqlens"], D_V, meta,
                                                      splits, causal=x["causal"], descale_q=x["descale_q"],
                                                      descale_k=x["descale_k"])


def openmla_sparse(x):
    if openmla is None:
        return None
    plan = openmla.SparsePlan.for_tensors(x["q"], x["cache"], x["indices"], **placement_kwargs())
    workspace = plan.alloc_workspace()
    return lambda: openmla.sparse_decode(x["q"], x["cache"], x["indices"], plan=plan, workspace=workspace)


def flash_mla_sparse(x, pad_heads_to: Optional[int] = None):
    if flash_mla is None:
        return None
    q = x["q"]
    if pad_heads_to is not None and q.shape[2] < pad_heads_to:
        q = torch.cat([q, q.new_zeros(*q.shape[:2], pad_heads_to - q.shape[2], D_QK)], dim=2)
    cache = x["cache"].view(torch.float8_e4m3fn)
    meta, _ = flash_mla.get_mla_metadata()
    return lambda: flash_mla.flash_mla_with_kvcache(q, cache, None, None, D_V, meta, is_fp8_kvcache=True,
                                                    indices=x["indices"])


def openmla_prefill(x):
    if openmla is None:
        return None
    return lambda: openmla.sparse_prefill(x["q"], x["kv"], x["indices"])


def flash_mla_prefill(x):
    if flash_mla is None:
        return None
    if x["h_q"] not in (64, 128) or x["fp8_cache"]:  # FlashMLA: 64 or 128 heads, BF16 kv only
        return None
    return lambda: flash_mla.flash_mla_sparse_fwd(x["q"], x["kv"], x["indices"], x["d_qk"] ** -0.5)


# An engine's decode step: every layer through the FlashMLA API with one metadata object per step
# (the first layer builds the schedule, the others reuse it), all layers in one graph.
ENGINE_LAYERS = 8


def engine_step_inputs(kind: str, b: int, h_q: int) -> dict:
    if kind == "dense":
        layers = [dense_inputs(b, 1, h_q, 1024, False, False, seed=layer) for layer in range(ENGINE_LAYERS)]
        # One block table and one lengths tensor for every layer, as an engine passes them (each layer
        # its own q and cache): the lengths tensor is what a metadata object's reuse is tied to.
        for layer in layers[1:]:
            layer["block_table"], layer["seqlens"] = layers[0]["block_table"], layers[0]["seqlens"]
    else:
        layers = [sparse_inputs(b, 1, h_q, seed=layer) for layer in range(ENGINE_LAYERS)]
    return dict(layers[0], layers=layers, kind=kind)


def engine_step_runner(module):
    def runner(x):
        if module is None:
            return None

        def step():
            meta, _ = module.get_mla_metadata()  # one object per step, as vLLM makes
            for layer in x["layers"]:
                if x["kind"] == "dense":
                    result = module.flash_mla_with_kvcache(layer["q"], layer["kv"], layer["block_table"],
                                                           layer["seqlens"], D_V, meta)
                else:
                    result = module.flash_mla_with_kvcache(layer["q"], layer["cache"].view(torch.float8_e4m3fn),
                                                           None, None, D_V, meta, is_fp8_kvcache=True,
                                                           indices=layer["indices"])
            return result  # the last layer's (out, lse)
        return step
    return runner


def openmla_engine_step(x):
    if openmla is None:
        return None
    step = engine_step_runner(importlib.import_module("openmla.flash_mla"))(x)
    # Check what the step measures: the first layer builds the schedule, the others reuse it.
    eager = importlib.import_module("openmla._eager")
    name = "_run_dense_scheduled" if x["kind"] == "dense" else "_run_sparse_scheduled"
    run, reuses = getattr(eager, name), []
    setattr(eager, name, lambda *args: (reuses.append(args[-2]), run(*args))[1])
    try:
        step()
    finally:
        setattr(eager, name, run)
    if reuses != [False] + [True] * (ENGINE_LAYERS - 1):
        raise RuntimeError(f"engine_step: OpenMLA's layers did not reuse the first layer's schedule: {reuses}")
    return step


def flash_mla_engine_step(x):
    return engine_step_runner(flash_mla)(x)


# ---------------------------------------------------------------------------------------------
# The case matrix
# ---------------------------------------------------------------------------------------------
def dense_flops(x):
    s_q, mean = x["s_q"], x["mean_len"]
    visible = mean - (s_q - 1) / 2.0 if x["causal"] else mean  # row i of s_q sees len - s_q + 1 + i keys
    return x["b"] * s_q * x["h_q"] * FLOPS_PER_KEY * visible


def dense_bytes(x):
    elem = x["kv"].element_size()
    return (x["b"] * x["mean_len"] * D_QK * elem + x["q"].numel() * x["q"].element_size()
            + x["b"] * x["s_q"] * x["h_q"] * D_V * 2)


def sparse_flops(x):
    return x["b"] * x["s_q"] * x["h_q"] * FLOPS_PER_KEY * x["topk"]


def sparse_bytes(x):
    return x["b"] * x["s_q"] * x["topk"] * TOKEN_BYTES + x["q"].numel() * 2 + x["b"] * x["s_q"] * x["h_q"] * D_V * 2


def prefill_flops(x):
    return x["s_q"] * x["h_q"] * 2 * (x["d_qk"] + D_V) * x["topk"]


def prefill_bytes(x):
    row_bytes = TOKEN_BYTES if x["fp8_cache"] else x["d_qk"] * 2
    return x["s_q"] * x["topk"] * row_bytes + x["q"].numel() * 2 + x["s_q"] * x["h_q"] * D_V * 2


def build_cases() -> List[Case]:
    cases: List[Case] = []

    def dense(group, b, s_q, h_q, s_k, spread, causal, dtype=torch.bfloat16):
        tag = "fp8 " if dtype == torch.float8_e4m3fn else ""
        name = f"{tag}dense b={b} h_q={h_q} s_q={s_q} s_k={s_k}{'~' if spread else ''}{' causal' if causal else ''}"
        runners = {"openmla": openmla_dense, "flash_mla": flash_mla_dense, "vllm_fp8": fork_dense_fp8}
        if s_q > 33 and h_q == 128:  # long query blocks: also one part, the planner's choice until 2026-12-02
            runners["openmla_one_part"] = lambda x: openmla_dense(x, max_parts=1)
        cases.append(Case(group, name, lambda: dense_inputs(b, s_q, h_q, s_k, spread, causal, dtype), runners,
                          dense_flops, dense_bytes))

    for s_k in (4096, 16384):
        for h_q in (16, 32, 64, 128):
            for s_q in (1, 2):
                dense("dense_long", 128, s_q, h_q, s_k, True, s_q > 1)
    for b in (1, 32, 128):
        for h_q in (16, 128):
            for s_q in (1, 4):
                dense("dense_short", b, s_q, h_q, 1024, False, s_q > 1)
    for s_q in (64, 67, 100, 128, 256, 512, 1024):
        dense("long_query", 4, s_q, 128, 4096, False, True)
    # Dense FP8 (#23): the BF16 matrix (dense_long, dense_short) with e4m3 q and KV, beside the vLLM
    # fork's kernel, plus the long query blocks the fork cannot run (h_q = 128, s_q >= 67).
    fp8 = torch.float8_e4m3fn
    for s_k in (4096, 16384):
        for h_q in (16, 32, 64, 128):
            for s_q in (1, 2):
                dense("dense_fp8", 128, s_q, h_q, s_k, True, s_q > 1, fp8)
    for b in (1, 32, 128):
        for h_q in (16, 128):
            for s_q in (1, 4):
                dense("dense_fp8", b, s_q, h_q, 1024, False, s_q > 1, fp8)
    for s_q in (67, 128, 1024):
        dense("dense_fp8", 4, s_q, 128, 4096, False, True, fp8)

    def sparse(group, b, s_q, h_q, pad, own_context=0):
        name = (f"sparse b={b} h_q={h_q} s_q={s_q} topk=2048" + (f" ctx={own_context} each" if own_context else "")
                + (f" (peer padded to {pad})" if pad else ""))
        runners = {"openmla": openmla_sparse, "flash_mla": lambda x: flash_mla_sparse(x, pad)}
        cases.append(Case(group, name, lambda: sparse_inputs(b, s_q, h_q, own_context=own_context), runners,
                          sparse_flops, sparse_bytes))

    for b in (64, 128):
        for h_q in (64, 128):
            for s_q in (1, 2):
                sparse("sparse", b, s_q, h_q, None)
        for h_q in (8, 16, 32):
            for s_q in (1, 2):
                sparse("sparse_narrow", b, s_q, h_q, 64)
    for h_q in (8, 16, 32, 64, 128):
        for s_q in (1, 2):
            sparse("sparse_hbm", 128, s_q, h_q, 64 if h_q < 64 else None, own_context=32768)

    for d_qk in (D_QK, 512):
        for s_kv, h_q in ((8192, 128), (32768, 128), (32768, 64), (32768, 16)):
            name = f"prefill s_q=4096 s_kv={s_kv} h_q={h_q} topk=2048" + ("" if d_qk == D_QK else f" d_qk={d_qk}")
            runners = {"openmla": openmla_prefill, "flash_mla": flash_mla_prefill}
            cases.append(Case("prefill", name, lambda s_kv=s_kv, h_q=h_q, d_qk=d_qk: prefill_inputs(
                4096, h_q, s_kv, d_qk=d_qk), runners, prefill_flops, prefill_bytes))
    for kind, batches, heads in (("dense", (1, 32, 128), (16, 128)), ("sparse", (64, 128), (64, 128))):
        for b in batches:
            for h_q in heads:
                name = f"{kind} step of {ENGINE_LAYERS} layers b={b} h_q={h_q} s_q=1" + (
                    " s_k=1024" if kind == "dense" else " topk=2048")
                runners = {"openmla": openmla_engine_step, "flash_mla": flash_mla_engine_step}
                flops, nbytes = (dense_flops, dense_bytes) if kind == "dense" else (sparse_flops, sparse_bytes)
                cases.append(Case("engine_step", name, lambda kind=kind, b=b, h_q=h_q: engine_step_inputs(kind, b, h_q),
                                  runners, lambda x, f=flops: ENGINE_LAYERS * f(x),
                                  lambda x, f=nbytes: ENGINE_LAYERS * f(x)))
    for h_q in (128, 64, 16):  # FP8-cache mode (OpenMLA only): the 656-byte cache read in place
        name = f"prefill fp8-cache s_q=4096 s_kv=32768 h_q={h_q} topk=2048"
        runners = {"openmla": openmla_prefill, "flash_mla": flash_mla_prefill}
        cases.append(Case("prefill", name, lambda h_q=h_q: prefill_inputs(4096, h_q, 32768, fp8_cache=True), runners,
                          prefill_flops, prefill_bytes))
    return cases


# ---------------------------------------------------------------------------------------------
# Timing: graph replay of one call, L2 flushed before each replay, CUDA events, median
# ---------------------------------------------------------------------------------------------
_flush = None


def flush_l2():
    global _flush
    if _flush is None:
        _flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")  # > 2x the 60 MB L2
    _flush.zero_()


def time_graph(fn: Callable, iters: int) -> tuple:
    stream = torch.cuda.Stream()
    # NOTE: the side stream must wait for the inputs and the workspace, made on the current stream. Without
    # this, the caching allocator could hand a call memory that the current stream's pending kernels
    # still write (a temporary freed there): a 2.75 GB sparse_hbm cache takes milliseconds to build, and the
    # schedule written into such a workspace was overwritten (an illegal address in the attention kernel,
    # with OpenMLA alone as with FlashMLA; docs/performance.md, session 27).
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            result = fn()  # warm-up; first calls plan / build metadata outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        result = fn()
    times = []
    for _ in range(iters):
        flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times), result


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    mask = torch.isfinite(a) & torch.isfinite(b)
    return float((a[mask] - b[mask]).norm() / b[mask].norm().clamp_min(1e-30))


def ceilings() -> dict:
    n = 1 << 30
    src, dst = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    end.synchronize()
    copy_gbps = 2 * n * 10 / (start.elapsed_time(end) * 1e-3) / 1e9
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    a @ a
    start.record()
    for _ in range(10):
        a @ a
    end.record()
    end.synchronize()
    gemm_tflops = 2 * 8192 ** 3 * 10 / (start.elapsed_time(end) * 1e-3) / 1e12
    del src, dst, a
    return {"copy_gbps": copy_gbps, "bf16_gemm_tflops": gemm_tflops}


def run(cases: List[Case], iters: int) -> None:
    for case in cases:
        x = case.make()
        outputs = {}
        for lib, runner in case.runners.items():
            try:
                fn = runner(x)
            except Exception as error:  # noqa: BLE001 - reported per case
                case.results[lib] = {"error": f"{type(error).__name__}: {error}".splitlines()[0][:300]}
                continue
            if fn is None:
                continue
            try:
                us, result = time_graph(fn, iters)
            except Exception as error:  # noqa: BLE001
                case.results[lib] = {"error": f"{type(error).__name__}: {error}".splitlines()[0][:300]}
                torch.cuda.synchronize()
                continue
            outputs[lib] = result[0]
            case.results[lib] = {"us": us, "tflops": case.flops(x) / us / 1e6, "gbps": case.bytes(x) / us / 1e3}
        if "openmla" in outputs:
            for lib, out in outputs.items():
                if lib != "openmla" and out.shape[-2] == outputs["openmla"].shape[-2]:
                    case.results[lib]["rel_l2_vs_openmla"] = rel_l2(outputs["openmla"], out)
                elif lib != "openmla":  # padded heads: compare the real ones
                    case.results[lib]["rel_l2_vs_openmla"] = rel_l2(outputs["openmla"],
                                                                    out[..., :outputs["openmla"].shape[-2], :])
        line = f"{case.group:13s} {case.name:55s}"
        ours = case.results.get("openmla", {}).get("us")
        for lib, r in case.results.items():
            if "us" in r:
                speed = f" speed {r['us'] / ours:.2f}" if ours and lib != "openmla" else ""
                line += f" | {lib} {r['us']:8.1f} us {r['tflops']:6.1f} TF {r['gbps']:6.0f} GB/s{speed}"
            else:
                line += f" | {lib} {r['error']}"
        print(line, flush=True)
        del x, outputs
        torch.cuda.empty_cache()


def summary(cases: List[Case]) -> dict:
    groups: Dict[str, List[float]] = {}
    for case in cases:
        ours = case.results.get("openmla", {}).get("us")
        peer = case.results.get("flash_mla", {}).get("us") or case.results.get("vllm_fp8", {}).get("us")
        if ours and peer:
            groups.setdefault(case.group, []).append(peer / ours)
    return {g: {"cases": len(s), "geomean_speed": math.exp(sum(map(math.log, s)) / len(s)), "worst": min(s)}
            for g, s in groups.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups",
                        default="dense_long,dense_short,sparse,sparse_narrow,long_query,dense_fp8,prefill,engine_step")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--json", default="")
    parser.add_argument("--commit", default="", help="commit to record (default: git rev-parse of the checkout)")
    parser.add_argument("--schedule-placement", type=int, default=0, choices=(0, 1, 2),
                        help="OpenMLA's dense and sparse decode plans: 0 the planner's choice, 1 a schedule kernel, "
                             "2 the attention kernel (engine_step, through openmla.flash_mla, and prefill always "
                             "run the planner's choice)")
    args = parser.parse_args()
    global SCHEDULE_PLACEMENT
    SCHEDULE_PLACEMENT = args.schedule_placement
    if not torch.cuda.is_available():
        print("compare.py: no CUDA device", file=sys.stderr)
        return 2
    groups = set(args.groups.split(","))
    cases = [c for c in build_cases() if c.group in groups and args.filter in c.name]
    info = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "iters": args.iters,
            "schedule_placement": args.schedule_placement,
            "commit": args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                                    text=True).stdout.strip(), **ceilings()}
    print("# " + json.dumps(info), flush=True)
    run(cases, args.iters)
    result = {"info": info, "summary": summary(cases),
              "cases": [{"group": c.group, "name": c.name, **{k: v for k, v in c.results.items()}} for c in cases]}
    print("# summary " + json.dumps(result["summary"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
