"""Host time per eager decode call: OpenMLA (its entry points and the pieces inside) and FlashMLA, one process.

    python3 bench/eager_overhead.py                 # CUDA: OpenMLA and, when importable, FlashMLA (`flash_mla`)
    python3 bench/eager_overhead.py --device cpu    # no GPU: the Python layers alone (the C++ run is stubbed)

Host time is what an engine's CPU spends to enqueue one call (the kernels run
asynchronously): each sample times `--calls` back-to-back calls with
time.perf_counter after a synchronize, and reports the median of `--repeats`
samples, per call, in microseconds. Cases (the bar of issue 24): dense bf16
b in {1, 32, 128}, h_q in {16, 128}, s_q = 1, s_k = 1024, page 64; sparse
(656-byte FP8 cache) b in {1, 128}, h_q in {64, 128}, topk 2048.

Rows per case:
  flash_mla.flash_mla_with_kvcache     FlashMLA 9241ae3, one FlashMLASchedMeta reused (as the layers of a step)
  openmla.flash_mla (drop-in)          the same call through openmla.flash_mla
  openmla.*_decode(plan, workspace)    openmla's own entry point (eager fast path)
  torch.ops.openmla.*_decode           the custom op (the torch.compile path; what eager calls paid before)
  . key + lookup                       building the prepared-call key and the dict lookup (_eager.*_key)
  . outputs (2x torch.empty)           allocating out and lse
  . run (binding + checks + launch)    the prepared call's run: address patching, api validation, launches
  paired: ...                          --paired: FlashMLA and the drop-in sampled alternately; the difference
                                       row is the median of per-pair differences
  . run reusing the schedule           sparse: the same, without the schedule kernel (what layers 2..61 of a
                                       step run through one FlashMLASchedMeta)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import openmla
from openmla import _C, _eager
from openmla import flash_mla as om_flash_mla

try:  # FlashMLA 9241ae3 (the peers: bash .peers/build_on_device.sh .peers; PYTHONPATH=.peers/site)
    import flash_mla as peer_flash_mla
except Exception as error:  # noqa: BLE001 - any import failure means "not measured"
    peer_flash_mla = None
    _PEER_ERROR = f"{type(error).__name__}: {error}"
else:
    _PEER_ERROR = ""

D_QK, D_V, PAGE, TOKEN_BYTES = 576, 512, 64, 656
PAIRED = False  # --paired


def host_us(fn, calls: int, repeats: int, sync) -> float:
    """Median host microseconds per call of `fn` (after warm-up)."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    sync()
    return statistics.median(samples)


def paired_us(peer, ours, calls: int, repeats: int, sync) -> tuple:
    """(peer, ours, ours - peer): medians over samples taken in alternating order, so drift cancels."""
    for fn in (peer, ours, peer, ours):
        fn()
    samples = []
    for i in range(repeats):
        pair = {}
        for name, fn in ((("peer", peer), ("ours", ours)) if i % 2 == 0 else (("ours", ours), ("peer", peer))):
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            pair[name] = (time.perf_counter() - start) / calls * 1e6
        samples.append(pair)
    sync()
    median = lambda key: statistics.median(p[key] for p in samples)
    return median("peer"), median("ours"), statistics.median(p["ours"] - p["peer"] for p in samples)


def add_paired(rows: dict, peer, ours, calls: int, repeats: int, sync) -> None:
    """The paired rows (--paired): FlashMLA and the drop-in sampled alternately, and their difference."""
    peer_us, ours_us, difference = paired_us(peer, ours, calls, repeats, sync)
    rows["paired: flash_mla"] = peer_us
    rows["paired: openmla.flash_mla (drop-in)"] = ours_us
    rows["paired: drop-in - flash_mla"] = difference


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------
def dense_inputs(b: int, h_q: int, s_k: int, device: str):
    pages_per_seq = (s_k + PAGE - 1) // PAGE
    q = torch.randn(b, 1, h_q, D_QK, device=device).bfloat16()
    kv = torch.randn(b * pages_per_seq, PAGE, 1, D_QK, device=device).bfloat16()
    table = torch.randperm(b * pages_per_seq, device=device, dtype=torch.int32).view(b, pages_per_seq)
    lens = torch.full((b,), s_k, dtype=torch.int32, device=device)
    return q, kv, table, lens


def sparse_inputs(b: int, h_q: int, topk: int, device: str):
    pages = max(64, (topk + PAGE - 1) // PAGE * 2)
    cache = torch.zeros(pages, PAGE, 1, TOKEN_BYTES, dtype=torch.uint8, device=device)
    cache[..., :512] = torch.randint(0, 0x70, (pages, PAGE, 1, 512), dtype=torch.uint8, device=device)
    cache[..., 512:528].view(torch.float32).fill_(0.01)  # per-tile scales
    cache[..., 528:].view(torch.bfloat16).copy_(torch.randn(pages, PAGE, 1, 64, device=device))
    q = torch.randn(b, 1, h_q, D_QK, device=device).bfloat16()
    indices = torch.randint(0, pages * PAGE, (b, 1, topk), dtype=torch.int32, device=device)
    return q, cache.view(torch.float8_e4m3fn), indices


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------
def dense_case(b, h_q, s_k, device, calls, repeats, sync, stub):
    q, kv, table, lens = dense_inputs(b, h_q, s_k, device)
    scale = D_QK ** -0.5
    rows = {}
    if peer_flash_mla is not None and device == "cuda":
        try:
            peer_meta, _ = peer_flash_mla.get_mla_metadata()
            peer = lambda: peer_flash_mla.flash_mla_with_kvcache(q, kv, table, lens, D_V, peer_meta, None, scale)
            peer_out = peer()[0]
            rows["flash_mla.flash_mla_with_kvcache"] = host_us(peer, calls, repeats, sync)
        except Exception as error:  # noqa: BLE001
            rows["flash_mla.flash_mla_with_kvcache"] = f"failed: {type(error).__name__}: {error}"[:200]
            peer_out = None
    else:
        peer_out = None
    meta, _ = om_flash_mla.get_mla_metadata()
    drop_in = lambda: om_flash_mla.flash_mla_with_kvcache(q, kv, table, lens, D_V, meta, None, scale)
    out = drop_in()[0]
    if peer_out is not None:
        sync()
        rows["max |openmla - flash_mla|"] = float((out.float() - peer_out.float()).abs().max())
    rows["openmla.flash_mla (drop-in)"] = host_us(drop_in, calls, repeats, sync)
    if PAIRED and peer_out is not None:
        add_paired(rows, peer, drop_in, calls, 2 * repeats + 1, sync)
    plan = openmla.DensePlan.for_tensors(q, kv, table)
    workspace = plan.alloc_workspace()
    rows["openmla.dense_decode(plan, workspace)"] = host_us(
        lambda: openmla.dense_decode(q, kv, table, lens, plan=plan, workspace=workspace, softmax_scale=scale),
        calls, repeats, sync)
    if not stub:
        rows["torch.ops.openmla.dense_decode"] = host_us(
            lambda: torch.ops.openmla.dense_decode(q, kv, table, lens, workspace, None, None, scale, False, D_V,
                                                   plan.num_sms, plan.max_parts, plan.min_parts),
            calls, repeats, sync)
    args = (q, kv, table, lens, workspace, None, None, scale, False, D_V, plan.num_sms, plan.max_parts,
            plan.min_parts)
    rows[". key + lookup"] = host_us(lambda: _eager._dense_calls.get(_eager.dense_key(*args)), calls, repeats, sync)
    call, dev, index, out_shape, out_dtype, lse_shape = _eager._dense_calls[_eager.dense_key(*args)][:6]
    rows[". outputs (2x torch.empty)"] = host_us(
        lambda: (torch.empty(out_shape, dtype=out_dtype, device=dev),
                 torch.empty(lse_shape, dtype=torch.float32, device=dev)), calls, repeats, sync)
    if not stub:
        o, lse = torch.empty(out_shape, dtype=out_dtype, device=dev), torch.empty(lse_shape, device=dev)
        ptrs = (q.data_ptr(), kv.data_ptr(), table.data_ptr(), lens.data_ptr(), o.data_ptr(), lse.data_ptr(), 0, 0,
                workspace.data_ptr(), workspace.nbytes)
        stream = _eager._stream(index, None)
        rows[". run (binding + checks + launch)"] = host_us(lambda: call.run(*ptrs, stream), calls, repeats, sync)
    return rows


def sparse_case(b, h_q, topk, device, calls, repeats, sync, stub):
    q, cache, indices = sparse_inputs(b, h_q, topk, device)
    scale = D_QK ** -0.5
    rows = {}
    peer_out = None
    if peer_flash_mla is not None and device == "cuda":
        try:
            peer_meta, _ = peer_flash_mla.get_mla_metadata()
            peer = lambda: peer_flash_mla.flash_mla_with_kvcache(q, cache, None, None, D_V, peer_meta, None, scale,
                                                                 False, True, indices)
            peer_out = peer()[0]
            rows["flash_mla.flash_mla_with_kvcache"] = host_us(peer, calls, repeats, sync)
        except Exception as error:  # noqa: BLE001
            rows["flash_mla.flash_mla_with_kvcache"] = f"failed: {type(error).__name__}: {error}"[:200]
    meta, _ = om_flash_mla.get_mla_metadata()
    drop_in = lambda: om_flash_mla.flash_mla_with_kvcache(q, cache, None, None, D_V, meta, None, scale, False, True,
                                                          indices)
    try:
        out = drop_in()[0]
    except NotImplementedError as error:
        return {"openmla": f"not implemented: {error}"[:200]}
    if peer_out is not None:
        sync()
        rows["max |openmla - flash_mla|"] = float((out.float() - peer_out.float()).abs().max())
    rows["openmla.flash_mla (drop-in)"] = host_us(drop_in, calls, repeats, sync)
    if PAIRED and peer_out is not None:
        add_paired(rows, peer, drop_in, calls, 2 * repeats + 1, sync)
    # With topk_length (every request full): the reuse also checks the lengths tensor's identity and version.
    lengths = torch.full((b,), topk, dtype=torch.int32, device=device)
    meta_lengths, _ = om_flash_mla.get_mla_metadata()
    rows["openmla.flash_mla (drop-in, topk_length)"] = host_us(
        lambda: om_flash_mla.flash_mla_with_kvcache(q, cache, None, None, D_V, meta_lengths, None, scale, False, True,
                                                    indices, None, None, None, lengths), calls, repeats, sync)
    plan = openmla.SparsePlan.for_tensors(q, cache, indices)
    workspace = plan.alloc_workspace()
    rows["openmla.sparse_decode(plan, workspace)"] = host_us(
        lambda: openmla.sparse_decode(q, cache, indices, plan=plan, workspace=workspace, softmax_scale=scale),
        calls, repeats, sync)
    if not stub:
        rows["torch.ops.openmla.sparse_decode"] = host_us(
            lambda: torch.ops.openmla.sparse_decode(q, cache, indices, workspace, None, None, scale, D_V,
                                                    plan.num_sms, plan.max_parts, plan.min_parts),
            calls, repeats, sync)
    args = (q, cache, indices, workspace, None, None, scale, D_V, plan.num_sms, plan.max_parts, plan.min_parts)
    rows[". key + lookup"] = host_us(lambda: _eager._sparse_calls.get(_eager.sparse_key(*args)), calls, repeats,
                                     sync)
    call, dev, index, out_shape, lse_shape = _eager._sparse_calls[_eager.sparse_key(*args)][:5]
    rows[". outputs (2x torch.empty)"] = host_us(
        lambda: (torch.empty(out_shape, dtype=torch.bfloat16, device=dev),
                 torch.empty(lse_shape, dtype=torch.float32, device=dev)), calls, repeats, sync)
    if not stub:
        o, lse = torch.empty(out_shape, dtype=torch.bfloat16, device=dev), torch.empty(lse_shape, device=dev)
        ptrs = (q.data_ptr(), cache.data_ptr(), indices.data_ptr(), 0, 0, o.data_ptr(), lse.data_ptr(),
                workspace.data_ptr(), workspace.nbytes)
        stream = _eager._stream(index, None)
        rows[". run (binding + checks + launch)"] = host_us(lambda: call.run(*ptrs, stream), calls, repeats, sync)
        record = _C.ScheduleRecord()
        call.run_with_schedule(*ptrs, stream, False, record)  # builds the schedule the next runs reuse
        rows[". run reusing the schedule"] = host_us(lambda: call.run_with_schedule(*ptrs, stream, True, record),
                                                     calls, repeats, sync)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--quick", action="store_true", help="one dense and one sparse case")
    parser.add_argument("--paired", action="store_true",
                        help="also sample FlashMLA and the drop-in alternately (2 * repeats + 1 pairs) and report "
                             "the median of their differences, which host drift does not bias")
    args = parser.parse_args()
    global PAIRED
    PAIRED = args.paired

    stub = args.device == "cpu"
    if stub:
        # The CPU run is the (slow) C++ reference: leave it out, keep every Python layer around it.
        _eager._run_dense = lambda *a: None
        _eager._run_sparse = lambda *a: None
        sync = lambda: None
    else:
        sync = torch.cuda.synchronize
    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else " (C++ run stubbed)"))
    print("FlashMLA: " + ("flash_mla imported" if peer_flash_mla is not None else f"not measured ({_PEER_ERROR})"))

    dense = [(1, 16), (1, 128), (32, 16), (32, 128), (128, 16), (128, 128)]
    sparse = [(1, 64), (1, 128), (128, 64), (128, 128)]
    if args.quick:
        dense, sparse = dense[:1], sparse[:1]
    results = {}
    for b, h_q in dense:
        name = f"dense b={b} h_q={h_q} s_k=1024"
        results[name] = dense_case(b, h_q, 1024, args.device, args.calls, args.repeats, sync, stub)
    for b, h_q in sparse:
        name = f"sparse b={b} h_q={h_q} topk=2048"
        results[name] = sparse_case(b, h_q, 2048, args.device, args.calls, args.repeats, sync, stub)

    for name, rows in results.items():
        print(f"\n{name}")
        for row, value in rows.items():
            shown = f"{value:8.2f} us" if isinstance(value, float) and not row.startswith("max") else value
            if row.startswith("max"):
                shown = f"{value:.3g}" if isinstance(value, float) else value
            print(f"  {row:42s} {shown}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
