"""The eager fast path: prepared calls, looked up by what their preparation read.

An engine makes the same decode call, with the same shapes, on every layer of
every step. Through the custom op each call paid the dispatcher, a TensorRef
per tensor, a new plan and the full checks (about 50 us of host time). Here,
when the call runs eagerly on plain tensors (not under torch.compile, not on
fake or other subclass tensors), the first call with a given key prepares a
`_C.DenseDecodeCall` / `_C.SparseDecodeCall` (the same C++ checks and planner
as the op), and later calls only look it up and run it with new addresses.

The key holds everything the preparation read: sizes, strides, dtype and
device of every tensor (None for an absent optional one), the workspace's
contiguity, device and dtype, softmax_scale, causal, d_v and the plan options.
Devices are torch.device objects, not indices: a meta tensor's index (-1) is the
CPU's, and a meta tensor must never reuse a CPU call. Values (sequence lengths,
indices) are never read on the host, so they are not in the key. The
preparation checks what the custom op checks (issue 28): every tensor's device,
d_v, the shapes before any output is allocated from them, and a workspace given
to a CPU run (which the reference does not read) as the GPU run would; the
workspace's size is checked on every call (by the run on a GPU, here on the
CPU). Per call the host work is: the key, one dict lookup, the outputs (the only
allocations, plus a workspace when the caller passes none), and one binding call
that patches the addresses into the prepared params and launches.

Errors name the public entry and argument the caller used (see `Entry`).

Schedule reuse (decode through a FlashMLA metadata object)
----------------------------------------------------------
A call rebuilds the split-KV schedule from its lengths (sparse: topk_length;
dense: cache_seqlens) into the workspace: in a schedule kernel, or in the
attention kernel itself (DecodePlan::schedule_in_kernel). FlashMLA builds its schedule once per FlashMLASchedMeta object (on
the first call that receives it) and reuses it for every later call with that
object; an engine makes one object per decode step and passes it to every
layer, and FlashMLA requires that an object is not reused with other lengths.
OpenMLA keeps the same contract, more strictly: a call that gets a metadata
object (`holder`) builds no schedule when that object's workspace
holds the schedule of an earlier eager call of this object with
  - the same prepared call (so the same plan: shapes, dtypes, strides, parts),
  - the same workspace tensor and the same current stream,
  - the same lengths object (topk_length may be None both times) and, unless it is an
    inference tensor (which tracks no version), the same `_version`, so an
    in-place torch write (`copy_`, `fill_`) to the lengths forces a rebuild;
and never by an eager call on an object that was once used in a capture
(replays rebuild the schedule into its workspace at times no eager call can
see). Under CUDA graph capture, the layers of a step reuse in the same way when
the building call was captured earlier in the same capture sequence on the same
stream: every replay then rebuilds the schedule in that call, from that replay's
lengths, before the layers that reuse it (an engine's decode graph builds once
per replay, not once per layer). Every other call rebuilds. The C++ run checks
the plan fingerprint, workspace, lengths pointer, stream and the capture
sequence again (ScheduleUse::kReuse in openmla/openmla.h) and refuses a reuse
it cannot prove. What neither can see is a write to the lengths' memory
that torch does not count (an inference tensor written in place, a kernel
writing through a raw pointer): as in FlashMLA, such a change needs a new
metadata object. The custom op (torch.compile tracing) always rebuilds; it does
not record anything on the object, so do not mix traced and eager calls on one
object with different lengths.
"""

from __future__ import annotations

import re
from typing import Optional

import torch
from torch import Tensor

from openmla import _C
from openmla._plans import run_config
from openmla._tensors import check_d_v, check_devices, ref, ref_or_none

# Prepared calls, per family. Cleared when they grow past _MAX_CALLS (an engine
# makes a few dozen distinct shapes; a runaway loop over shapes must not leak).
_MAX_CALLS = 4096
_dense_calls: dict = {}
_sparse_calls: dict = {}

_FLOAT32 = torch.float32
_UINT8 = torch.uint8
# What the C++ run accepts as a workspace (tensor_args.cpp, workspace_bytes).
_WORKSPACE_DTYPES = (torch.uint8, torch.int32)


def applies(q: Tensor) -> bool:
    """True when a call can take the fast path: a plain tensor, outside torch.compile tracing."""
    return type(q) is Tensor and not torch.compiler.is_compiling()


# ---------------------------------------------------------------------------
# Streams and devices, without torch.cuda's Python wrappers
# ---------------------------------------------------------------------------
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_current_device = getattr(torch._C, "_cuda_getDevice", None)


def _stream(device_index: int, stream: Optional[torch.cuda.Stream]) -> int:
    if device_index < 0:
        return 0
    if stream is not None:
        return stream.cuda_stream
    if _raw_stream is not None:
        return _raw_stream(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def _launch_on(device_index: int):
    """None when `device_index` is the CPU or the current CUDA device, else a context that makes it current."""
    if device_index < 0:
        return None
    current = _current_device() if _current_device is not None else torch.cuda.current_device()
    return None if current == device_index else torch.cuda.device(device_index)


# ---------------------------------------------------------------------------
# Messages: the public entry and argument names
# ---------------------------------------------------------------------------
class Entry:
    """A public entry point: its name and how it calls the tensors the C++ checks name.

    `names` maps openmla's argument names (kv_cache, seqlens, workspace, ...) to
    the ones the caller used (k_cache, cache_seqlens, tile_scheduler_metadata, ...).
    """

    def __init__(self, name: str, tensors: tuple, names: Optional[dict] = None, aliases: Optional[dict] = None):
        self.name = name
        self.tensors = tensors  # the tensor names the C++ uses, as prefixes of params fields (longest first)
        self.names = names or {}
        self.aliases = aliases or {}  # C++ tensor name -> openmla's argument name

    def renamed(self, name: str, names: dict) -> "Entry":
        """The same arguments under another public entry, with the caller's names."""
        return Entry(name, self.tensors, names, self.aliases)

    def public(self, internal: str) -> str:
        """The caller's name for an argument the C++ names (params fields included: q_dtype -> q)."""
        argument = _FIELD_ARGUMENTS.get(internal)
        if argument is None:
            argument = next((t for t in self.tensors if internal == t or internal.startswith(t + "_")), internal)
        argument = self.aliases.get(argument, argument)
        return self.names.get(argument, argument)


# Params / shape fields -> the argument they come from.
_FIELD_ARGUMENTS = {
    "batch": "q", "s_q": "q", "h_q": "q", "d_qk": "q", "h_kv": "kv_cache", "page_size": "kv_cache",
    "num_pages": "kv_cache", "max_pages_per_seq": "block_table", "topk": "indices", "kv_dtype": "kv_cache",
    "out_dtype": "q", "workspace_bytes": "workspace", "info": "device", "device_info": "device",
}
_PREFIX = re.compile(r"^(?:[A-Za-z_][\w.]*: )+")
_ARGUMENT = re.compile(r"argument '(\w+)'")
_DTYPE_FIELD = re.compile(r"\b(q|kv)_dtype\b")

DENSE = Entry("dense_decode", ("block_table", "kv_cache", "kv_scale", "q_scale", "seqlens", "workspace", "out",
                               "lse", "kv", "q"), aliases={"kv": "kv_cache"})
PREFILL = Entry("sparse_prefill", ("topk_length", "attn_sink", "indices", "max_logits", "out", "lse", "kv", "q"))
SPARSE = Entry("sparse_decode", ("topk_length", "attn_sink", "kv_cache", "workspace", "indices", "out", "lse",
                                 "kv", "q"), aliases={"kv": "kv_cache"})


def _argument(entry: Entry, internal: str) -> str:
    """"argument 'k_cache'", or "argument 'k_cache' (page_size)" when the C++ named a part of it."""
    public = entry.public(internal)
    if public == internal or internal in entry.tensors or internal in entry.names or \
            _DTYPE_FIELD.fullmatch(internal) or entry.aliases.get(internal) == public:
        return f"argument '{public}'"
    return f"argument '{public}' ({internal})"


def public_error(error: Exception, entry: Entry) -> Exception:
    """`error` with one prefix (the public entry) and the caller's argument names."""
    message = _PREFIX.sub("", str(error), count=1)
    message = _ARGUMENT.sub(lambda m: _argument(entry, m.group(1)), message)
    message = _DTYPE_FIELD.sub(lambda m: entry.public(m.group(1)) + ".dtype", message)
    if entry.names:
        renamed = re.compile(r"\b(" + "|".join(map(re.escape, entry.names)) + r")\b")
        message = renamed.sub(lambda m: entry.names[m.group(1)], message)
    return type(error)(f"{entry.name}: {message}")


# ---------------------------------------------------------------------------
# Workspaces kept by the caller's metadata object
# ---------------------------------------------------------------------------
def _held_workspace(call, device: torch.device, index: int, holder: object, slot: str) -> Tensor:
    """`holder.<slot>` when it fits this call, else a new workspace (stored there when there is a holder).

    The holders are FlashMLA's metadata objects: an engine makes one per step and passes it to every
    layer, so the workspace is allocated once per step (or once per captured graph).
    """
    if holder is None:
        return torch.empty(call.workspace_bytes, dtype=_UINT8, device=device)
    workspace = getattr(holder, slot, None)
    if workspace is None or workspace.nbytes < call.workspace_bytes or workspace.get_device() != index:
        workspace = torch.empty(call.workspace_bytes, dtype=_UINT8, device=device)
        setattr(holder, slot, workspace)
    return workspace


# ---------------------------------------------------------------------------
# Schedule reuse (module docstring, "Schedule reuse")
# ---------------------------------------------------------------------------
_SCHEDULE_SLOT = "_openmla_schedule"


def _capture_id(stream: int) -> int:
    """The id of the CUDA graph capture `stream` is recording (0: not capturing)."""
    return _C.stream_capture_id(stream)


class ScheduleState:
    """What a metadata object's workspace holds: the schedule its last building call left there."""

    __slots__ = ("record", "call", "workspace", "lengths", "version", "stream", "capture", "filled", "captured")

    def __init__(self, record):
        self.record = record  # _C.ScheduleRecord: the C++ run's own account of the same workspace
        self.call = self.workspace = self.lengths = self.version = self.stream = None
        self.capture = 0       # the capture that recorded the last build (0: it ran eagerly)
        self.filled = False    # the last building call completed
        self.captured = False  # used in a CUDA graph capture once: never reused by an eager call again


def _lengths_version(lengths: Optional[Tensor]):
    """topk_length's torch version counter (None when absent or an inference tensor, which has none)."""
    return None if lengths is None or lengths.is_inference() else lengths._version


def schedule_use(holder: object, call, workspace: Tensor, lengths: Optional[Tensor], stream: int):
    """(state, reuse): whether this call may skip building the schedule, and the holder's state to update.

    When the answer is False, `state` already describes what this call builds; the caller sets
    `state.filled` once the run succeeded (`schedule_built`).
    """
    state = getattr(holder, _SCHEDULE_SLOT, None)
    if state is None:
        state = ScheduleState(_C.ScheduleRecord())
        setattr(holder, _SCHEDULE_SLOT, state)
    capture = _capture_id(stream)
    if capture:
        state.captured = True
    version = _lengths_version(lengths)
    # Eager calls reuse an eager build of an object never captured; captured calls reuse a build
    # captured earlier in the same capture, which every replay runs before them.
    if state.filled and state.capture == capture and (capture or not state.captured) and state.call is call and \
            state.workspace is workspace and state.lengths is lengths and state.version == version and \
            state.stream == stream:
        return state, True
    state.filled = False
    state.call, state.workspace, state.lengths, state.version, state.stream = call, workspace, lengths, version, stream
    state.capture = capture
    return state, False


def _run_on_stream(run, run_scheduled, args: tuple, call, workspace: Optional[Tensor], lengths: Optional[Tensor],
                   index: int, stream: Optional[torch.cuda.Stream], reuse_holder: object, holder: object) -> None:
    """Runs a prepared call: `run(*args, stream)`, or `run_scheduled(*args, stream, reuse, record)` with the
    schedule reused when provable, for a call of a metadata object (`reuse_holder`) on the current device and
    stream. Any other run through a holder's workspace makes that holder forget its schedule."""
    switch = _launch_on(index)
    if reuse_holder is not None and index >= 0 and stream is None and switch is None:
        raw_stream = _stream(index, None)
        state, reuse = schedule_use(reuse_holder, call, workspace, lengths, raw_stream)
        run_scheduled(*args, raw_stream, reuse, state.record)
        if not reuse:
            schedule_built(state)
        return
    if holder is not None:
        forget_schedule(holder)
    if switch is not None:
        with switch:
            run(*args, _stream(index, stream))
    else:
        run(*args, _stream(index, stream))


def forget_schedule(holder: object) -> None:
    """A run wrote `holder`'s workspace without recording what it built there: reuse nothing of it."""
    state = getattr(holder, _SCHEDULE_SLOT, None)
    if state is not None:
        state.filled = False


def schedule_built(state: ScheduleState) -> None:
    """After a building run returned: the workspace holds the schedule `state` describes, for calls in
    `state.capture` (eager calls when 0)."""
    state.filled = True


# ---------------------------------------------------------------------------
# Checks a preparation makes before the C++ ones (the custom op makes the same)
# ---------------------------------------------------------------------------
def _check_are_tensors(entry: Entry, required: tuple, optional: tuple) -> None:
    """Names the first argument that is not a tensor (called only when the key could not be read)."""
    for arguments, expected in ((required, "a torch.Tensor"), (optional, "a torch.Tensor or None")):
        for name, value in arguments:
            if not isinstance(value, Tensor) and (value is not None or arguments is required):
                name = entry.public(name)
                raise TypeError(f"{entry.name}: argument '{name}' must be a tensor: got {name} of type "
                                f"{type(value).__name__}, expected {expected}")


def _check_tensors(entry: Entry, tensors: tuple, d_v) -> None:
    """Every tensor on cpu or cuda (a meta tensor has no data to read), and d_v, named as the caller names them."""
    check_devices(entry.name, tuple((entry.public(name), t) for name, t in tensors))
    check_d_v(entry.name, d_v, entry.public("d_v"))


def _cpu_workspace_bytes(entry: Entry, workspace: Tensor, q: Tensor, plan) -> int:
    """plan's workspace size, after checking a workspace given to a CPU run as a GPU run checks it.

    The reference reads no workspace, but one given must be one the GPU run would take (dtype, device,
    contiguity here; its size on every call, against the returned byte count).
    """
    name = entry.public("workspace")
    if workspace.dtype not in _WORKSPACE_DTYPES:
        raise NotImplementedError(f"{entry.name}: argument '{name}' has an unsupported dtype: got {name}.dtype = "
                                  f"{str(workspace.dtype).removeprefix('torch.')}, expected uint8 "
                                  "(plan.alloc_workspace()) or int32")
    if workspace.device != q.device:
        raise ValueError(f"{entry.name}: argument '{name}' is on another device: got {name}.device = "
                         f"{workspace.device}, expected {q.device} (the device of {entry.public('q')})")
    if not workspace.is_contiguous():
        raise ValueError(f"{entry.name}: argument '{name}' is not contiguous: got {name}.stride() = "
                         f"{list(workspace.stride())}, expected a contiguous tensor")
    return plan.workspace_bytes


def _workspace_too_small(entry: Entry, workspace: Tensor, required: int) -> ValueError:
    """The C++ run's message for a short workspace (a CPU run checks it here)."""
    return ValueError(f"{entry.name}: argument 'workspace_bytes' is smaller than the plan's workspace: got "
                      f"workspace_bytes = {workspace.nbytes}, expected workspace_bytes >= "
                      f"plan.workspace.total_bytes = {required}")


# ---------------------------------------------------------------------------
# Dense decode
# ---------------------------------------------------------------------------
def _optional_key(t: Optional[Tensor]):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def dense_key(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale, softmax_scale, causal, d_v, num_sms,
              max_parts, min_parts, batch_invariant=False, schedule_placement=0) -> tuple:
    """Everything a dense preparation reads (see the module docstring)."""
    return (q.shape, q.stride(), q.dtype, q.device,
            kv_cache.shape, kv_cache.stride(), kv_cache.dtype, kv_cache.device,
            block_table.shape, block_table.stride(), block_table.dtype, block_table.device,
            seqlens.shape, seqlens.stride(), seqlens.dtype, seqlens.device,
            _optional_key(q_scale), _optional_key(kv_scale),
            None if workspace is None else (workspace.is_contiguous(), workspace.device, workspace.dtype),
            softmax_scale, causal, d_v, num_sms, max_parts, min_parts, batch_invariant, schedule_placement)


def _prepare_dense(key, q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale, softmax_scale, causal,
                   d_v, num_sms, max_parts, min_parts, entry: Entry, batch_invariant=False, schedule_placement=0):
    _check_tensors(entry, (("q", q), ("kv_cache", kv_cache), ("block_table", block_table), ("seqlens", seqlens),
                           ("workspace", workspace), ("q_scale", q_scale), ("kv_scale", kv_scale)), d_v)
    out_dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
    device = q.device
    info, options = run_config(device, num_sms, max_parts, min_parts, batch_invariant, schedule_placement,
                               entry.name)
    try:
        # Shapes checked (arguments named) before any output is allocated from them.
        shape = _C.dense_decode_shape(ref(q), ref(kv_cache), ref(block_table), d_v)
        b, s_q, h_q = shape.batch, shape.s_q, shape.h_q
        out = torch.empty((b, s_q, h_q, d_v), dtype=out_dtype, device=device)
        lse = torch.empty((b, h_q, s_q), dtype=_FLOAT32, device=device)
        call = _C.prepare_dense_decode(ref(q), ref(kv_cache), ref(block_table), ref(seqlens), ref(out), ref(lse),
                                       ref_or_none(q_scale), ref_or_none(kv_scale), softmax_scale, causal, info,
                                       options, ref_or_none(workspace))
        cpu_plan = _C.plan_dense_decode(shape, info, options) if call.device < 0 and workspace is not None else None
    except (ValueError, NotImplementedError) as error:
        raise public_error(error, entry) from None
    cpu_workspace_bytes = 0 if cpu_plan is None else _cpu_workspace_bytes(entry, workspace, q, cpu_plan)
    if len(_dense_calls) >= _MAX_CALLS:
        _dense_calls.clear()
    prepared = (call, device, call.device, (b, s_q, h_q, d_v), out_dtype, (b, h_q, s_q), cpu_workspace_bytes)
    _dense_calls[key] = prepared
    return prepared


def dense_decode(q: Tensor, kv_cache: Tensor, block_table: Tensor, seqlens: Tensor, workspace: Optional[Tensor],
                 q_scale: Optional[Tensor], kv_scale: Optional[Tensor], softmax_scale: float, causal: bool, d_v: int,
                 num_sms: int, max_parts: int, min_parts: int, stream: Optional[torch.cuda.Stream] = None,
                 entry: Entry = DENSE, holder: object = None, slot: str = "", batch_invariant: bool = False,
                 reuse_schedule: bool = False, schedule_placement: int = 0):
    """out [batch, s_q, h_q, d_v], lse [batch, h_q, s_q] fp32: the custom op's result, without the dispatcher.

    With workspace None, `holder.<slot>` (when given) keeps the workspace from call to call; else one is
    allocated for this call. reuse_schedule: the holder is a FlashMLASchedMeta, whose contract (one object
    per set of lengths) lets its layers reuse the schedule ("Schedule reuse"); the tensor dialect's holder
    is a metadata tensor an engine may keep across steps, so its calls always rebuild.
    """
    try:
        key = dense_key(q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale, softmax_scale, causal, d_v,
                        num_sms, max_parts, min_parts, batch_invariant, schedule_placement)
    except AttributeError:
        _check_are_tensors(entry, (("q", q), ("kv_cache", kv_cache), ("block_table", block_table),
                                   ("seqlens", seqlens)),
                           (("workspace", workspace), ("q_scale", q_scale), ("kv_scale", kv_scale)))
        raise
    prepared = _dense_calls.get(key)
    if prepared is None:
        prepared = _prepare_dense(key, q, kv_cache, block_table, seqlens, workspace, q_scale, kv_scale,
                                  softmax_scale, causal, d_v, num_sms, max_parts, min_parts, entry, batch_invariant,
                                  schedule_placement)
    call, device, index, out_shape, out_dtype, lse_shape, cpu_workspace_bytes = prepared
    out = torch.empty(out_shape, dtype=out_dtype, device=device)
    lse = torch.empty(lse_shape, dtype=_FLOAT32, device=device)
    if workspace is None:
        if index >= 0:
            workspace = _held_workspace(call, device, index, holder, slot)
    elif index < 0 and workspace.nbytes < cpu_workspace_bytes:
        raise _workspace_too_small(entry, workspace, cpu_workspace_bytes)
    try:
        _run_on_stream(_run_dense, _run_dense_scheduled,
                       (call, q, kv_cache, block_table, seqlens, out, lse, q_scale, kv_scale, workspace),
                       call, workspace, seqlens, index, stream, holder if reuse_schedule else None, holder)
    except (ValueError, NotImplementedError) as error:
        raise public_error(error, entry) from None
    return out, lse


def _run_dense(call, q, kv_cache, block_table, seqlens, out, lse, q_scale, kv_scale, workspace, stream):
    call.run(q.data_ptr(), kv_cache.data_ptr(), block_table.data_ptr(), seqlens.data_ptr(), out.data_ptr(),
             lse.data_ptr(), 0 if q_scale is None else q_scale.data_ptr(),
             0 if kv_scale is None else kv_scale.data_ptr(), 0 if workspace is None else workspace.data_ptr(),
             0 if workspace is None else workspace.nbytes, stream)


def _run_dense_scheduled(call, q, kv_cache, block_table, seqlens, out, lse, q_scale, kv_scale, workspace, stream,
                         reuse, record):
    call.run_with_schedule(q.data_ptr(), kv_cache.data_ptr(), block_table.data_ptr(), seqlens.data_ptr(),
                           out.data_ptr(), lse.data_ptr(), 0 if q_scale is None else q_scale.data_ptr(),
                           0 if kv_scale is None else kv_scale.data_ptr(), workspace.data_ptr(), workspace.nbytes,
                           stream, reuse, record)


# ---------------------------------------------------------------------------
# Sparse decode
# ---------------------------------------------------------------------------
def sparse_key(q, kv_cache, indices, workspace, topk_length, attn_sink, softmax_scale, d_v, num_sms, max_parts,
               min_parts, batch_invariant=False, schedule_placement=0) -> tuple:
    """Everything a sparse preparation reads (see the module docstring)."""
    return (q.shape, q.stride(), q.dtype, q.device,
            kv_cache.shape, kv_cache.stride(), kv_cache.dtype, kv_cache.device,
            indices.shape, indices.stride(), indices.dtype, indices.device,
            _optional_key(topk_length), _optional_key(attn_sink),
            None if workspace is None else (workspace.is_contiguous(), workspace.device, workspace.dtype),
            softmax_scale, d_v, num_sms, max_parts, min_parts, batch_invariant, schedule_placement)


def _prepare_sparse(key, q, kv_cache, indices, workspace, topk_length, attn_sink, softmax_scale, d_v, num_sms,
                    max_parts, min_parts, entry: Entry, batch_invariant=False, schedule_placement=0):
    _check_tensors(entry, (("q", q), ("kv_cache", kv_cache), ("indices", indices), ("workspace", workspace),
                           ("topk_length", topk_length), ("attn_sink", attn_sink)), d_v)
    device = q.device
    info, options = run_config(device, num_sms, max_parts, min_parts, batch_invariant, schedule_placement,
                               entry.name)
    try:
        # Shapes checked (arguments named) before any output is allocated from them.
        shape = _C.sparse_decode_shape(ref(q), ref(kv_cache), ref(indices), d_v)
        b, s_q, h_q = shape.batch, shape.s_q, shape.h_q
        out = torch.empty((b, s_q, h_q, d_v), dtype=torch.bfloat16, device=device)
        lse = torch.empty((b, h_q, s_q), dtype=_FLOAT32, device=device)
        call = _C.prepare_sparse_decode(ref(q), ref(kv_cache), ref(indices), ref_or_none(topk_length),
                                        ref_or_none(attn_sink), ref(out), ref(lse), softmax_scale, info, options,
                                        ref_or_none(workspace))
        cpu_plan = _C.plan_sparse_decode(shape, info, options) if call.device < 0 and workspace is not None else None
    except (ValueError, NotImplementedError) as error:
        raise public_error(error, entry) from None
    cpu_workspace_bytes = 0 if cpu_plan is None else _cpu_workspace_bytes(entry, workspace, q, cpu_plan)
    if len(_sparse_calls) >= _MAX_CALLS:
        _sparse_calls.clear()
    prepared = (call, device, call.device, (b, s_q, h_q, d_v), (b, h_q, s_q), cpu_workspace_bytes)
    _sparse_calls[key] = prepared
    return prepared


def sparse_decode(q: Tensor, kv_cache: Tensor, indices: Tensor, workspace: Optional[Tensor],
                  topk_length: Optional[Tensor], attn_sink: Optional[Tensor], softmax_scale: float, d_v: int,
                  num_sms: int, max_parts: int, min_parts: int, stream: Optional[torch.cuda.Stream] = None,
                  entry: Entry = SPARSE, holder: object = None, slot: str = "", batch_invariant: bool = False,
                  schedule_placement: int = 0):
    """out [batch, s_q, h_q, d_v] bf16, lse [batch, h_q, s_q] fp32, without the dispatcher."""
    try:
        key = sparse_key(q, kv_cache, indices, workspace, topk_length, attn_sink, softmax_scale, d_v, num_sms,
                         max_parts, min_parts, batch_invariant, schedule_placement)
    except AttributeError:
        _check_are_tensors(entry, (("q", q), ("kv_cache", kv_cache), ("indices", indices)),
                           (("workspace", workspace), ("topk_length", topk_length), ("attn_sink", attn_sink)))
        raise
    prepared = _sparse_calls.get(key)
    if prepared is None:
        prepared = _prepare_sparse(key, q, kv_cache, indices, workspace, topk_length, attn_sink, softmax_scale, d_v,
                                   num_sms, max_parts, min_parts, entry, batch_invariant, schedule_placement)
    call, device, index, out_shape, lse_shape, cpu_workspace_bytes = prepared
    out = torch.empty(out_shape, dtype=torch.bfloat16, device=device)
    lse = torch.empty(lse_shape, dtype=_FLOAT32, device=device)
    if workspace is None:
        if index >= 0:
            workspace = _held_workspace(call, device, index, holder, slot)
    elif index < 0 and workspace.nbytes < cpu_workspace_bytes:
        raise _workspace_too_small(entry, workspace, cpu_workspace_bytes)
    try:
        _run_on_stream(_run_sparse, _run_sparse_scheduled,
                       (call, q, kv_cache, indices, topk_length, attn_sink, out, lse, workspace),
                       call, workspace, topk_length, index, stream, holder, holder)
    except (ValueError, NotImplementedError) as error:
        raise public_error(error, entry) from None
    return out, lse


def _run_sparse(call, q, kv_cache, indices, topk_length, attn_sink, out, lse, workspace, stream):
    call.run(q.data_ptr(), kv_cache.data_ptr(), indices.data_ptr(),
             0 if topk_length is None else topk_length.data_ptr(), 0 if attn_sink is None else attn_sink.data_ptr(),
             out.data_ptr(), lse.data_ptr(), 0 if workspace is None else workspace.data_ptr(),
             0 if workspace is None else workspace.nbytes, stream)



def _run_sparse_scheduled(call, q, kv_cache, indices, topk_length, attn_sink, out, lse, workspace, stream, reuse,
                          record):
    call.run_with_schedule(q.data_ptr(), kv_cache.data_ptr(), indices.data_ptr(),
                           0 if topk_length is None else topk_length.data_ptr(),
                           0 if attn_sink is None else attn_sink.data_ptr(), out.data_ptr(), lse.data_ptr(),
                           workspace.data_ptr(), workspace.nbytes, stream, reuse, record)
