"""Schedule reuse of decode through a FlashMLA metadata object (openmla/_eager.py, "Schedule reuse").

CPU tests hold the decision (when a call may skip the schedule kernel and when it
must not); the GPU tests hold the results against the reference when layers
reuse the schedule, across steps, and in a CUDA graph.
"""

import pytest
import torch

from openmla import _eager, flash_mla, flash_mla_tensor_metadata
from mla_reference import (TOKEN_BYTES, assert_attention_close, default_scale, dense_decode_ref, make_dense_inputs,
                           quantize_sparse_tokens, random_indices,
                           sparse_decode_ref)

STREAM = 7


class Holder:
    """Stands in for a FlashMLASchedMeta (any object with a __dict__)."""


@pytest.fixture
def not_capturing(monkeypatch):
    """[capture id]: 0 (eager) until a test sets the id of the capture its calls are recorded in."""
    capture = [0]
    monkeypatch.setattr(_eager, "_capture_id", lambda stream: capture[0])
    return capture


def _call(holder, call, workspace, lengths, stream=STREAM, built=True):
    """schedule_use, then schedule_built when the call built (as sparse_decode does after a run that returned)."""
    state, reuse = _eager.schedule_use(holder, call, workspace, lengths, stream)
    if not reuse and built:
        _eager.schedule_built(state)
    return reuse


# ---------------------------------------------------------------------------
# The decision, on the CPU
# ---------------------------------------------------------------------------
def test_layers_of_one_step_reuse(not_capturing):
    holder, call, workspace, lengths = Holder(), object(), torch.empty(8), torch.tensor([5, 9], dtype=torch.int32)
    assert [_call(holder, call, workspace, lengths) for _ in range(4)] == [False, True, True, True]
    # No topk_length (every item full length): the same.
    holder = Holder()
    assert [_call(holder, call, workspace, None) for _ in range(3)] == [False, True, True]


def test_new_metadata_object_builds(not_capturing):
    call, workspace, lengths = object(), torch.empty(8), torch.tensor([5], dtype=torch.int32)
    first, second = Holder(), Holder()
    assert _call(first, call, workspace, lengths) is False
    assert _call(second, call, workspace, lengths) is False
    assert _call(second, call, workspace, lengths) is True


def test_other_shapes_workspace_or_stream_build(not_capturing):
    holder, call, workspace, lengths = Holder(), object(), torch.empty(8), torch.tensor([5], dtype=torch.int32)
    assert _call(holder, call, workspace, lengths) is False
    other_call = object()  # another prepared call: other shapes, strides or parts, so another plan
    assert _call(holder, other_call, workspace, lengths) is False
    assert _call(holder, call, workspace, lengths) is False  # the workspace now holds other_call's schedule
    assert _call(holder, call, workspace, lengths) is True
    assert _call(holder, call, torch.empty(8), lengths) is False  # another workspace
    holder = Holder()
    assert _call(holder, call, workspace, lengths) is False
    assert _call(holder, call, workspace, lengths, stream=STREAM + 1) is False  # another stream


def test_changed_lengths_build(not_capturing):
    holder, call, workspace = Holder(), object(), torch.empty(8)
    lengths = torch.tensor([5, 9], dtype=torch.int32)
    assert _call(holder, call, workspace, lengths) is False
    # Same values in another tensor: rebuilt (only identity is provable without reading the device).
    assert _call(holder, call, workspace, lengths.clone()) is False
    # The same tensor written in place (as an engine updates its CUDA-graph buffers): rebuilt.
    assert _call(holder, call, workspace, lengths) is False
    assert _call(holder, call, workspace, lengths) is True
    lengths.copy_(torch.tensor([1, 2], dtype=torch.int32))
    assert _call(holder, call, workspace, lengths) is False
    lengths[0] = 3
    assert _call(holder, call, workspace, lengths) is False
    assert _call(holder, call, workspace, lengths) is True
    assert _call(holder, call, workspace, None) is False  # topk_length dropped


def test_inference_tensor_lengths_follow_flash_mla_rule(not_capturing):
    """Inference tensors track no version: the object's lengths are FlashMLA's contract (documented)."""
    holder, call, workspace = Holder(), object(), torch.empty(8)
    with torch.inference_mode():
        lengths = torch.tensor([5, 9], dtype=torch.int32)
        assert _call(holder, call, workspace, lengths) is False
        assert _call(holder, call, workspace, lengths) is True
        assert _call(holder, call, workspace, lengths.clone()) is False


def test_failed_run_is_not_recorded(not_capturing):
    holder, call, workspace, lengths = Holder(), object(), torch.empty(8), None
    assert _call(holder, call, workspace, lengths, built=False) is False  # the run raised
    assert _call(holder, call, workspace, lengths) is False
    assert _call(holder, call, workspace, lengths) is True


def test_capture_reuses_only_its_own_build_and_poisons_the_object(not_capturing):
    holder, call, workspace, lengths = Holder(), object(), torch.empty(8), torch.tensor([5], dtype=torch.int32)
    assert _call(holder, call, workspace, lengths) is False
    assert _call(holder, call, workspace, lengths) is True
    not_capturing[0] = 5  # capture 5: its first call records the schedule kernel, the later ones reuse it
    assert [_call(holder, call, workspace, lengths) for _ in range(3)] == [False, True, True]
    not_capturing[0] = 6  # another capture never reuses capture 5's build
    assert [_call(holder, call, workspace, lengths) for _ in range(2)] == [False, True]
    assert _call(holder, call, workspace, lengths, stream=STREAM + 1) is False  # nor another stream's
    not_capturing[0] = 0  # the graphs' replays rewrite this workspace's schedule: eager calls never reuse again
    assert [_call(holder, call, workspace, lengths) for _ in range(3)] == [False, False, False]
    assert getattr(holder, _eager._SCHEDULE_SLOT).captured
    not_capturing[0] = 7  # a later capture still builds once and reuses within itself
    assert [_call(holder, call, workspace, lengths) for _ in range(2)] == [False, True]


def test_capture_rebuilds_after_a_write_to_the_lengths(not_capturing):
    holder, call, workspace, lengths = Holder(), object(), torch.empty(8), torch.tensor([5], dtype=torch.int32)
    not_capturing[0] = 9
    assert _call(holder, call, workspace, lengths) is False
    lengths.add_(1)  # a write captured between two layers: torch counts it
    assert _call(holder, call, workspace, lengths) is False
    assert _call(holder, call, workspace, lengths) is True
    assert _call(holder, call, workspace, lengths, built=False) is True  # reuse needs no build
    failed = Holder()
    assert _call(failed, call, workspace, lengths, built=False) is False  # a captured build that raised
    assert _call(failed, call, workspace, lengths) is False


# ---------------------------------------------------------------------------
# The drop-in's calls, on the CPU with a stand-in GPU call
# ---------------------------------------------------------------------------
class RecordingCall:
    """A prepared call on 'device 0' that records how it was run."""

    device = 0
    workspace_bytes = 64

    def __init__(self):
        self.runs = []

    def run_with_schedule(self, *args):
        self.runs.append(args[-2])  # reuse

    def run(self, *args):
        self.runs.append("plain")


def _sparse_args(b=2, h_q=64, topk=128):
    cache = torch.zeros(4, 64, 1, TOKEN_BYTES, dtype=torch.uint8).view(torch.float8_e4m3fn)
    q = torch.zeros(b, 1, h_q, 576, dtype=torch.bfloat16)
    indices = torch.zeros(b, 1, topk, dtype=torch.int32)
    return q, cache, indices


def _stand_in(monkeypatch, not_capturing, q, cache, indices, topk_length):
    """Makes the drop-in's sparse call for these tensors run a RecordingCall as if on a GPU."""
    call = RecordingCall()
    key = _eager.sparse_key(q, cache, indices, None, topk_length, None, default_scale(), 512, 0, 0, 0)
    b, h_q = q.shape[0], q.shape[2]
    monkeypatch.setitem(_eager._sparse_calls, key, (call, q.device, 0, (b, 1, h_q, 512), (b, h_q, 1), 0))
    monkeypatch.setattr(_eager, "_launch_on", lambda index: None)
    monkeypatch.setattr(_eager, "_stream", lambda index, stream: STREAM)
    workspaces = {}

    def held(call, device, index, holder, slot):  # one workspace per metadata object, as on a GPU
        return workspaces.setdefault(id(holder), torch.empty(call.workspace_bytes, dtype=torch.uint8))

    monkeypatch.setattr(_eager, "_held_workspace", held)
    return call


def _drop_in(meta, q, cache, indices, topk_length):
    return flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, None, default_scale(), False, True,
                                            indices, None, None, None, topk_length)


def test_drop_in_reuses_within_a_step(monkeypatch, not_capturing):
    q, cache, indices = _sparse_args()
    lengths = torch.tensor([100, 7], dtype=torch.int32)
    call = _stand_in(monkeypatch, not_capturing, q, cache, indices, lengths)
    step = flash_mla.get_mla_metadata()[0]
    for _ in range(4):  # four layers, one metadata object
        _drop_in(step, q, cache, indices, lengths)
    assert call.runs == [False, True, True, True]
    # The next step: a new object (and new lengths in the same buffer): the first layer builds.
    lengths.copy_(torch.tensor([3, 128], dtype=torch.int32))
    step = flash_mla.get_mla_metadata()[0]
    for _ in range(2):
        _drop_in(step, q, cache, indices, lengths)
    assert call.runs[4:] == [False, True]
    # A capture builds once and its later layers reuse; eager calls on the object never reuse afterwards.
    not_capturing[0] = 3
    for _ in range(3):
        _drop_in(step, q, cache, indices, lengths)
    not_capturing[0] = 0
    for _ in range(2):
        _drop_in(step, q, cache, indices, lengths)
    assert call.runs[6:] == [False, True, True, False, False]


def test_drop_in_other_shapes_build(monkeypatch, not_capturing):
    q, cache, indices = _sparse_args(b=2)
    call = _stand_in(monkeypatch, not_capturing, q, cache, indices, None)
    q1, cache1, indices1 = _sparse_args(b=1)
    call1 = _stand_in(monkeypatch, not_capturing, q1, cache1, indices1, None)
    step = flash_mla.get_mla_metadata()[0]
    _drop_in(step, q, cache, indices, None)
    _drop_in(step, q, cache, indices, None)
    with pytest.raises(ValueError, match="tile_scheduler_metadata' was filled by a call with other arguments"):
        _drop_in(step, q1, cache1, indices1, None)  # FlashMLA's rule: one object per shape
    other = flash_mla.get_mla_metadata()[0]
    _drop_in(other, q1, cache1, indices1, None)
    assert call.runs == [False, True] and call1.runs == [False]


def _dense_stand_in(monkeypatch, q, kv, table, lengths):
    """Makes the drop-in's dense call for these tensors run a RecordingCall as if on a GPU."""
    call = RecordingCall()
    key = _eager.dense_key(q, kv, table, lengths, None, None, None, default_scale(), False, 512, 0, 0, 0, False)
    b, h_q = q.shape[0], q.shape[2]
    monkeypatch.setitem(_eager._dense_calls, key, (call, q.device, 0, (b, 1, h_q, 512), q.dtype, (b, h_q, 1), 0))
    monkeypatch.setattr(_eager, "_launch_on", lambda index: None)
    monkeypatch.setattr(_eager, "_stream", lambda index, stream: STREAM)
    workspaces = {}  # one per metadata object, as on a GPU
    monkeypatch.setattr(_eager, "_held_workspace", lambda call, device, index, holder, slot: workspaces.setdefault(
        id(holder), torch.empty(call.workspace_bytes, dtype=torch.uint8)))
    return call


def test_dense_drop_in_reuses_within_a_step(monkeypatch, not_capturing):
    x = make_dense_inputs([100, 7], h_q=16)
    call = _dense_stand_in(monkeypatch, x.q, x.kv_cache, x.block_table, x.seqlens)
    step = flash_mla.get_mla_metadata()[0]
    layer = lambda: flash_mla.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, step, None,
                                                     default_scale())
    for _ in range(3):  # three layers, one metadata object
        layer()
    assert call.runs == [False, True, True]
    x.seqlens.add_(1)  # an in-place write torch counts: rebuilt
    layer()
    layer()
    assert call.runs[3:] == [False, True]
    not_capturing[0] = 4  # a capture builds once, its later layers reuse; eager calls never reuse afterwards
    layer()
    layer()
    not_capturing[0] = 0
    layer()
    assert call.runs[5:] == [False, True, False]


def test_dense_tensor_dialect_always_rebuilds(monkeypatch, not_capturing):
    """The tensor dialect's holder is a metadata tensor an engine may keep across steps: never a reuse."""
    x = make_dense_inputs([64], h_q=16)
    seen = []
    dense_decode = _eager.dense_decode

    def recorded(*args, **kwargs):
        seen.append(kwargs.get("reuse_schedule", False))
        return dense_decode(*args, **kwargs)

    monkeypatch.setattr(_eager, "dense_decode", recorded)
    meta, splits = flash_mla_tensor_metadata.get_mla_metadata(x.seqlens, 16, 1)
    for _ in range(2):
        flash_mla_tensor_metadata.flash_mla_with_kvcache(x.q, x.kv_cache, x.block_table, x.seqlens, 512, meta, splits)
    assert seen == [False, False]
    # And a held workspace written without a record is never reused by a scheduled call after it.
    call = _dense_stand_in(monkeypatch, x.q, x.kv_cache, x.block_table, x.seqlens)
    holder = Holder()
    for reuse_schedule in (True, False, True, True):
        _eager.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, None, None, None, default_scale(), False,
                            512, 0, 0, 0, None, _eager.DENSE, holder, "_openmla_workspace",
                            reuse_schedule=reuse_schedule)
    assert call.runs == [False, "plain", False, True]


# ---------------------------------------------------------------------------
# On the GPU: results against the reference
# ---------------------------------------------------------------------------
def _gpu_cache(pages: int, seed: int):
    torch.manual_seed(seed)
    return quantize_sparse_tokens(torch.randn(pages * 64, 576)).reshape(pages, 64, 1, TOKEN_BYTES).cuda()


def _layers(num_layers, b, h_q, topk, pages, seed):
    """Per layer: q, cache and indices of their own (as the layers of a model)."""
    layers = []
    for layer in range(num_layers):
        torch.manual_seed(seed + layer)
        q = torch.randn(b, 1, h_q, 576, device="cuda").bfloat16()
        layers.append((q, _gpu_cache(pages, seed + 100 + layer),
                       random_indices((b, 1, topk), pages * 64, seed=seed + layer).cuda()))
    return layers


def _log_reuse(monkeypatch, name: str) -> list:
    """The `reuse` flag of every run of _eager.<name> (a scheduled run), in order."""
    log = []
    run = getattr(_eager, name)

    def logged(*args):
        log.append(args[-2])
        return run(*args)

    monkeypatch.setattr(_eager, name, logged)
    return log


@pytest.fixture
def reuse_log(monkeypatch):
    return _log_reuse(monkeypatch, "_run_sparse_scheduled")


@pytest.mark.gpu
@pytest.mark.parametrize("b, h_q, topk, lengths, with_sink", [
    (1, 64, 2048, [2048], False),          # one request split over the parts: the combine runs
    (2, 128, 2048, [1500, 37], True),      # CTA pairs, a short request, the sink
    (5, 64, 256, [256, 0, 1, 200, 65], False),  # an empty request
])
def test_layers_reuse_the_schedule_gpu(reuse_log, b, h_q, topk, lengths, with_sink):
    pages = max(8, topk // 32)
    layers = _layers(3, b, h_q, topk, pages, seed=b * 10 + h_q)
    sink = torch.randn(h_q, device="cuda") if with_sink else None
    topk_length = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    steps = [(topk_length, lengths)]
    # Step 2: new lengths written into the same buffer in place (an engine's CUDA-graph buffer), a new object.
    new_lengths = [max(0, topk - 1 - n) for n in lengths]
    steps.append((topk_length, new_lengths))
    for step, (buffer, values) in enumerate(steps):
        buffer.copy_(torch.tensor(values, dtype=torch.int32))
        meta = flash_mla.get_mla_metadata()[0]
        start = len(reuse_log)
        for q, cache, indices in layers:
            out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, is_fp8_kvcache=True,
                                                        indices=indices, attn_sink=sink, topk_length=buffer)
            torch.cuda.synchronize()
            out_ref, lse_ref = sparse_decode_ref(q, cache, indices, default_scale(), buffer, sink)
            assert_attention_close(out, lse, out_ref, lse_ref)
        assert reuse_log[start:] == [False, True, True], f"step {step}"
    # The same object after an in-place write to its lengths: rebuilt (torch counts the write), still right.
    topk_length.copy_(torch.tensor(lengths, dtype=torch.int32))
    q, cache, indices = layers[0]
    out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, is_fp8_kvcache=True,
                                                indices=indices, attn_sink=sink, topk_length=topk_length)
    torch.cuda.synchronize()
    assert reuse_log[-1] is False
    assert_attention_close(out, lse, *sparse_decode_ref(q, cache, indices, default_scale(), topk_length, sink))


@pytest.mark.gpu
def test_captured_layers_rebuild_on_replay_gpu(reuse_log):
    b, h_q, topk = 2, 64, 512
    layers = _layers(3, b, h_q, topk, 16, seed=3)
    topk_length = torch.tensor([512, 100], dtype=torch.int32, device="cuda")
    meta = flash_mla.get_mla_metadata()[0]
    # Warm-up eager call on the object (prepares the call, fills the workspace), then capture.
    flash_mla.flash_mla_with_kvcache(*layers[0][:2], None, None, 512, meta, is_fp8_kvcache=True,
                                     indices=layers[0][2], topk_length=topk_length)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        outs = [flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, is_fp8_kvcache=True,
                                                 indices=indices, topk_length=topk_length)
                for q, cache, indices in layers]
    torch.cuda.current_stream().wait_stream(stream)
    # The first captured layer records the schedule kernel; the others reuse it, so every replay builds
    # the schedule from its own lengths once, before the layers that read it.
    assert reuse_log[1:] == [False, True, True]
    for values in ([7, 512], [300, 0]):
        topk_length.copy_(torch.tensor(values, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        for (q, cache, indices), (out, lse) in zip(layers, outs):
            assert_attention_close(out, lse, *sparse_decode_ref(q, cache, indices, default_scale(), topk_length))
    # Eager calls on the captured object never reuse (replays rewrite its workspace).
    for q, cache, indices in layers:
        out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, is_fp8_kvcache=True,
                                                    indices=indices, topk_length=topk_length)
        torch.cuda.synchronize()
        assert_attention_close(out, lse, *sparse_decode_ref(q, cache, indices, default_scale(), topk_length))
    assert reuse_log[4:] == [False, False, False]
    # The first graph still rebuilds on its replays after the eager calls (which wrote the workspace).
    topk_length.copy_(torch.tensor([512, 33], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    for (q, cache, indices), (out, lse) in zip(layers, outs):
        assert_attention_close(out, lse, *sparse_decode_ref(q, cache, indices, default_scale(), topk_length))


@pytest.fixture
def dense_reuse_log(monkeypatch):
    return _log_reuse(monkeypatch, "_run_dense_scheduled")


def _dense_layers(num_layers, capacity, h_q, s_q, seed):
    """Per layer: its own q and cache over one block table (pages for `capacity` tokens per request)."""
    layers = []
    for layer in range(num_layers):
        x = make_dense_inputs(capacity, h_q=h_q, s_q=s_q, seed=seed + layer, device="cuda")
        layers.append((x.q, x.kv_cache, x.block_table))
    return layers


@pytest.mark.gpu
@pytest.mark.parametrize("capacity, h_q, s_q, causal", [
    ([1024], 128, 1, False),                  # one request split over the parts: the combine runs
    ([700, 64, 1, 300], 16, 2, True),         # short requests, causal
])
def test_dense_layers_reuse_the_schedule_gpu(dense_reuse_log, capacity, h_q, s_q, causal):
    layers = _dense_layers(3, capacity, h_q, s_q, seed=h_q)
    seqlens = torch.tensor(capacity, dtype=torch.int32, device="cuda")
    # Step 2: shorter lengths written into the same buffer in place, a new metadata object.
    for step, values in enumerate((capacity, [max(0, n // 3 - 1) for n in capacity])):
        seqlens.copy_(torch.tensor(values, dtype=torch.int32))
        meta = flash_mla.get_mla_metadata()[0]
        start = len(dense_reuse_log)
        for q, kv, table in layers:
            out, lse = flash_mla.flash_mla_with_kvcache(q, kv, table, seqlens, 512, meta, causal=causal)
            torch.cuda.synchronize()
            assert_attention_close(out, lse, *dense_decode_ref(q, kv, table, seqlens, default_scale(), causal))
        assert dense_reuse_log[start:] == [False, True, True], f"step {step}"


@pytest.mark.gpu
def test_dense_captured_layers_rebuild_on_replay_gpu(dense_reuse_log):
    capacity = [900, 130, 5]
    layers = _dense_layers(3, capacity, 64, 1, seed=11)
    seqlens = torch.tensor(capacity, dtype=torch.int32, device="cuda")
    meta = flash_mla.get_mla_metadata()[0]
    flash_mla.flash_mla_with_kvcache(*layers[0], seqlens, 512, meta)  # warm-up: prepares, fills the workspace
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        outs = [flash_mla.flash_mla_with_kvcache(q, kv, table, seqlens, 512, meta) for q, kv, table in layers]
    torch.cuda.current_stream().wait_stream(stream)
    assert dense_reuse_log[1:] == [False, True, True]  # one schedule kernel per replay, before the layers
    for values in ([3, 130, 0], [512, 1, 5]):  # within each request's pages (capacity)
        seqlens.copy_(torch.tensor(values, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        for (q, kv, table), (out, lse) in zip(layers, outs):
            assert_attention_close(out, lse, *dense_decode_ref(q, kv, table, seqlens, default_scale()))
