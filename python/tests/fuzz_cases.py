"""Hostile-input fuzz cases for the Python API, run in a child process by test_fuzz.py.

    python fuzz_cases.py SEED COUNT

Each case makes valid CPU inputs for one family (dense_decode, sparse_decode,
sparse_prefill, flash_mla), applies 0-3 random mutations (ranks, dtypes,
devices, sizes, layouts, scalars, plans, workspaces, index values) and calls
the API. Allowed outcomes:
  - ValueError / NotImplementedError / TypeError whose message starts
    "<entry>: argument '<name>' ";
  - a result without NaN (inputs hold NaN wherever no request may read), equal
    to the unmutated call's when only the layout was mutated.
Anything else is printed as "FAIL <seed> <case> <labels>: <what>"; the process
exits 1 if any case failed. A crash kills the process: the parent reports the batch.
"""

from __future__ import annotations

import random
import re
import sys
import traceback

import torch

import openmla
from openmla import flash_mla, flash_mla_tensor_metadata
from mla_reference import TOKEN_BYTES, make_dense_inputs, quantize_sparse_tokens, random_indices

CLEAN = re.compile(r"^(\w+): argument '[^']+' ")
ERRORS = (ValueError, NotImplementedError, TypeError)


# ---------------------------------------------------------------------------
# Mutations: each takes (args dict, rng) and returns True when it changes only the layout
# ---------------------------------------------------------------------------
def _tensor_mutations(names):
    def rank(a, r):
        n = r.choice(names)
        a[n] = a[n][0] if a[n].dim() > 0 and a[n].shape[0] > 0 and r.random() < 0.5 else a[n].unsqueeze(0)
    def dtype(a, r):
        n = r.choice(names)
        a[n] = a[n].to(r.choice([torch.float32, torch.float64, torch.int64, torch.int8, torch.float16]))
    def meta(a, r):
        n = r.choice(names)
        a[n] = a[n].to("meta")
    def empty(a, r):
        n = r.choice(names)
        if a[n].dim() > 0:
            a[n] = a[n].narrow(r.randrange(a[n].dim()), 0, 0)
    def non_contiguous(a, r):
        n = r.choice(names)
        if a[n].dim() >= 2:
            a[n] = a[n].transpose(-1, -2)
    def scalar(a, r):
        n = r.choice(names)
        a[n] = torch.tensor(1.0)
    return [("rank", rank), ("dtype", dtype), ("meta", meta), ("empty", empty), ("non_contiguous", non_contiguous),
            ("scalar", scalar)]


def _scalar_mutations():
    def softmax_scale(a, r):
        a["softmax_scale"] = r.choice([float("nan"), float("inf"), -1.0, 0.0, "abc", [1.0], 1e-30])
    def d_v(a, r):
        a["d_v"] = r.choice([-1, 0, 256, 511, 2**40, "x"])
    return [("softmax_scale", softmax_scale), ("d_v", d_v)]


def _permute(t: torch.Tensor, d0: int, d1: int) -> torch.Tensor:
    """The same values stored with dims d0 and d1 swapped in memory."""
    return t.transpose(d0, d1).contiguous().transpose(d0, d1)


# ---------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------
def dense_case(r: random.Random):
    lengths = [r.choice([0, 1, 5, 40, 100]) for _ in range(r.randint(1, 3))]
    s_q, h_kv = r.randint(1, 3), r.choice([1, 1, 2])
    dtype = r.choice([torch.bfloat16, torch.float16, torch.float8_e4m3fn])
    x = make_dense_inputs(lengths, s_q=s_q, h_q=h_kv * r.choice([1, 8, 16]), h_kv=h_kv,
                          page_size=r.choice([1, 16, 64]), dtype=dtype, seed=r.randrange(1000))
    args = dict(q=x.q, kv_cache=x.kv_cache, block_table=x.block_table, seqlens=x.seqlens,
                causal=r.random() < 0.5)
    if dtype == torch.float8_e4m3fn:
        args.update(q_scale=torch.tensor([0.05]), kv_scale=torch.tensor([0.05]))

    def seqlens(a, r):
        a["seqlens"] = a["seqlens"].clone()
        # NOTE: not above a request's written tokens: reading the cache's NaN there is the caller's garbage.
        a["seqlens"][r.randrange(len(lengths))] = r.choice([-1, -2**31, 0])
    def block_table(a, r):
        a["block_table"] = a["block_table"].clone()
        a["block_table"].view(-1)[r.randrange(a["block_table"].numel())] = r.choice([-1, 2**31 - 1, 10**6])
    def scales(a, r):
        n = r.choice(["q_scale", "kv_scale"])
        a[n] = torch.tensor([r.choice([float("nan"), float("inf"), 0.0, -1.0])])
    def layout(a, r):
        n = r.choice(["q", "kv_cache"])
        a[n] = _permute(a[n], 1, 2)
        return True
    def plan(a, r):
        a["plan"] = r.choice(["nope", 3, openmla.SparsePlan(batch=1, h_q=16, topk=64, num_pages=1, device="cpu"),
                              openmla.DensePlan(batch=len(lengths) + 1, h_q=16, num_pages=4, max_pages_per_seq=2,
                                                device="cpu")])
    def workspace(a, r):
        a["workspace"] = r.choice([torch.empty(1, dtype=torch.uint8), torch.empty(10**6, dtype=torch.float64),
                                   torch.empty(10**6, dtype=torch.uint8, device="meta"),
                                   torch.empty(10**6, dtype=torch.uint8)[::2]])
    muts = _tensor_mutations(["q", "kv_cache", "block_table", "seqlens"]) + _scalar_mutations() + [
        ("seqlens_value", seqlens), ("block_table_value", block_table), ("scales", scales), ("layout", layout),
        ("plan", plan), ("workspace", workspace)]

    def call(a):
        a = dict(a)
        return openmla.dense_decode(a.pop("q"), a.pop("kv_cache"), a.pop("block_table"), a.pop("seqlens"), **a)
    return args, muts, call


def _sparse_cache(num_pages, page_size, seed):
    gen = torch.Generator().manual_seed(seed)
    return quantize_sparse_tokens(torch.randn(num_pages * page_size, 576, generator=gen)).reshape(
        num_pages, page_size, 1, TOKEN_BYTES)


def sparse_case(r: random.Random):
    b, s_q, h_q, topk, num_pages = r.randint(1, 3), r.randint(1, 2), r.choice([16, 64]), r.choice([64, 128]), 3
    cache = _sparse_cache(num_pages, 64, r.randrange(1000))
    args = dict(q=torch.randn(b, s_q, h_q, 576).bfloat16(), kv_cache=cache,
                indices=random_indices((b, s_q, topk), num_pages * 64, seed=r.randrange(1000)))
    if r.random() < 0.5:
        args["topk_length"] = torch.randint(0, topk + 1, (b,), dtype=torch.int32)
    if r.random() < 0.5:
        args["attn_sink"] = torch.randn(h_q)

    def indices(a, r):
        a["indices"] = a["indices"].clone()
        a["indices"].view(-1)[r.randrange(a["indices"].numel())] = r.choice([-1, -2**31, 2**31 - 1, 10**6])
    def topk_length(a, r):
        a["topk_length"] = torch.tensor([r.choice([-1, 2**31 - 1, 0, topk]) for _ in range(b)], dtype=torch.int32)
    def layout(a, r):
        a["q"] = _permute(a["q"], 1, 2)
        return True
    def plan(a, r):
        a["plan"] = r.choice(["nope", openmla.SparsePlan(batch=b, s_q=s_q, h_q=h_q, topk=topk + 64,
                                                         num_pages=num_pages, device="cpu")])
    muts = _tensor_mutations(["q", "kv_cache", "indices"]) + _scalar_mutations() + [
        ("indices_value", indices), ("topk_length", topk_length), ("layout", layout), ("plan", plan)]

    def call(a):
        a = dict(a)
        return openmla.sparse_decode(a.pop("q"), a.pop("kv_cache"), a.pop("indices"), **a)
    return args, muts, call


def prefill_case(r: random.Random):
    s_q, h_q, s_kv, topk = r.randint(1, 4), r.choice([8, 16]), r.randint(1, 80), r.randint(1, 70)
    if r.random() < 0.3:  # FP8-cache mode: kv is the 656-byte paged cache
        page_size = r.choice([1, 5, 64])
        s_kv = page_size * r.randint(1, 3)
        kv = _sparse_cache(s_kv // page_size, page_size, r.randrange(1000))
    else:
        kv = torch.randn(s_kv, 1, 576).bfloat16()
    args = dict(q=torch.randn(s_q, h_q, 576).bfloat16(), kv=kv,
                indices=random_indices((s_q, 1, topk), s_kv, seed=r.randrange(1000)))

    def indices(a, r):
        a["indices"] = a["indices"].clone()
        a["indices"].view(-1)[r.randrange(a["indices"].numel())] = r.choice([-1, -2**31, 2**31 - 1, s_kv])
    def layout(a, r):
        a["q"] = _permute(a["q"], 0, 1)
        return True
    muts = _tensor_mutations(["q", "kv", "indices"]) + _scalar_mutations() + [("indices_value", indices),
                                                                              ("layout", layout)]

    def call(a):
        a = dict(a)
        return openmla.sparse_prefill(a.pop("q"), a.pop("kv"), a.pop("indices"), **a)
    return args, muts, call


def metadata_case(r: random.Random):
    args = dict(cache_seqlens=torch.tensor([5, 9], dtype=torch.int32), num_q_tokens_per_head_k=16, num_heads_k=1)

    def counts(a, r):
        a[r.choice(["num_q_tokens_per_head_k", "num_heads_k"])] = r.choice([0, -1, -16])
    def seqlens(a, r):
        a["cache_seqlens"] = r.choice([torch.tensor(5, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32)])
    muts = [("counts", counts), ("cache_seqlens", seqlens)]

    def call(a):
        a = dict(a)
        # The tensor form reads these (openmla.flash_mla's get_mla_metadata ignores its arguments).
        return flash_mla_tensor_metadata.get_mla_metadata(a.pop("cache_seqlens"), a.pop("num_q_tokens_per_head_k"),
                                                          a.pop("num_heads_k"))
    return args, muts, call


def flash_mla_case(r: random.Random):
    """The drop-in: FlashMLA's form (bf16), or vLLM's dense FP8 names of the tensor-metadata form."""
    lengths = [r.choice([0, 3, 70]) for _ in range(r.randint(1, 3))]
    fp8 = r.random() < 0.3
    s_q = r.randint(1, 2)
    x = make_dense_inputs(lengths, s_q=s_q, h_q=16, page_size=64,
                          dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16, seed=r.randrange(1000))
    args = dict(q=x.q, k_cache=x.kv_cache, block_table=x.block_table, cache_seqlens=x.seqlens, head_dim_v=512)
    if fp8:
        metadata, splits = flash_mla_tensor_metadata.get_mla_metadata_dense_fp8(x.seqlens, s_q * 16, 1)
        args.update(tile_scheduler_metadata=metadata, num_splits=splits, descale_q=torch.tensor([0.05]),
                    descale_k=torch.tensor([0.05]))
    else:
        args.update(tile_scheduler_metadata=flash_mla.get_mla_metadata()[0], is_fp8_kvcache=False)

    def flag(a, r):
        if "is_fp8_kvcache" in a:
            a["is_fp8_kvcache"] = not a["is_fp8_kvcache"]
    def metadata(a, r):
        a["tile_scheduler_metadata"] = r.choice([torch.empty(1, dtype=torch.int32), "x", 7, None])
    def descale(a, r):
        if "descale_q" in a:
            a[r.choice(["descale_q", "descale_k"])] = torch.tensor([r.choice([float("nan"), -1.0, 1.0])])
    def head_dim_v(a, r):
        a["head_dim_v"] = r.choice([0, -1, 576, "x"])
    muts = _tensor_mutations(["q", "k_cache", "block_table", "cache_seqlens"]) + [
        ("is_fp8_kvcache", flag), ("metadata", metadata), ("descale", descale), ("head_dim_v", head_dim_v)]

    def call(a):
        a = dict(a)
        fn = (flash_mla_tensor_metadata.flash_mla_with_kvcache_fp8 if "descale_q" in a
              else flash_mla.flash_mla_with_kvcache)
        return fn(a.pop("q"), a.pop("k_cache"), a.pop("block_table"), a.pop("cache_seqlens"), a.pop("head_dim_v"),
                  a.pop("tile_scheduler_metadata"), **a)
    return args, muts, call


FAMILIES = [dense_case, sparse_case, prefill_case, metadata_case, flash_mla_case]


def _has_nan(result) -> bool:
    tensors = result if isinstance(result, tuple) else (result,)
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.device.type == "cpu" and
               bool(torch.isnan(t.float()).any()) for t in tensors)


def run(seed: int, count: int) -> int:
    failures = 0
    for i in range(count):
        r = random.Random(seed * 100003 + i)
        family = FAMILIES[i % len(FAMILIES)]
        args, muts, call = family(r)
        chosen = r.sample(muts, r.randint(0, min(3, len(muts))))
        layout_only = bool(chosen)
        mutated = dict(args)
        applied = []
        for name, mutate in chosen:
            try:  # an earlier mutation may leave nothing for this one to change
                layout_only = bool(mutate(mutated, r)) and layout_only
                applied.append(name)
            except Exception:  # noqa: BLE001
                layout_only = False
        labels = "+".join(applied) or "none"
        where = f"{seed} {i} {family.__name__}[{labels}]"
        try:
            result = call(mutated)
        except ERRORS as e:
            if not CLEAN.match(str(e)):
                failures += 1
                print(f"FAIL {where}: unclear {type(e).__name__}: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - any other exception type is a failure
            failures += 1
            print(f"FAIL {where}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
            continue
        if family is metadata_case:
            continue
        if _has_nan(result):
            failures += 1
            print(f"FAIL {where}: NaN in the result (poisoned input read, or garbage)")
        elif layout_only:
            want = call(args)
            if not all(torch.equal(g, w) for g, w in zip(result, want)):
                failures += 1
                print(f"FAIL {where}: a layout-only change altered the result")
    print(f"fuzz batch {seed}: {count} cases, {failures} failures")
    return failures


if __name__ == "__main__":
    sys.exit(1 if run(int(sys.argv[1]), int(sys.argv[2])) else 0)
