"""torch.library registration: schemas, fake implementations, opcheck, torch.compile (CPU backend)."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import openmla
from mla_reference import TOKEN_BYTES, make_dense_inputs, quantize_sparse_tokens, random_indices


def _dense_args(x, workspace=None, q_scale=None, kv_scale=None):
    return (x.q, x.kv_cache, x.block_table, x.seqlens, workspace, q_scale, kv_scale, 0.05, True, 512, 0, 0, 0)


def _sparse_inputs():
    cache = quantize_sparse_tokens(torch.randn(128, 576)).reshape(2, 64, 1, TOKEN_BYTES)
    q = torch.randn(2, 1, 16, 576).bfloat16()
    return q, cache, random_indices((2, 1, 64), 128)


def test_ops_registered_with_schemas():
    for name in ("dense_decode", "sparse_decode", "sparse_prefill"):
        assert hasattr(torch.ops.openmla, name)
    schema = str(torch.ops.openmla.dense_decode.default._schema)
    assert "Tensor(a4!)? workspace" in schema and "-> (Tensor, Tensor)" in schema
    assert "Tensor(a3!)? workspace" in str(torch.ops.openmla.sparse_decode.default._schema)
    assert "-> (Tensor, Tensor, Tensor)" in str(torch.ops.openmla.sparse_prefill.default._schema)


def test_schedule_placement_reaches_every_run(monkeypatch):
    # A plan's schedule_placement is what its runs re-plan with: eager calls (openmla.dense_decode /
    # sparse_decode) and the custom ops, whose trailing argument carries it.
    from openmla import _eager, _ops
    seen = []

    def record_placement(module):
        real = module.run_config

        def run_config(device, num_sms, max_parts, min_parts, batch_invariant=False, schedule_placement=0,
                       entry="PlanOptions"):
            seen.append(schedule_placement)
            return real(device, num_sms, max_parts, min_parts, batch_invariant, schedule_placement, entry)
        monkeypatch.setattr(module, "run_config", run_config)

    record_placement(_eager)
    record_placement(_ops)
    _eager._dense_calls.clear()  # a prepared call would skip the re-plan
    _eager._sparse_calls.clear()
    x = make_dense_inputs([100, 7], h_q=16)
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table, device=openmla.DeviceInfo(),
                                         schedule_placement=2)
    openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, plan=plan)
    torch.ops.openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, None, None, None, 0.1, False, 512,
                                   0, 0, 0, False, 1)
    q, cache, indices = _sparse_inputs()
    sparse_plan = openmla.SparsePlan.for_tensors(q, cache, indices, device=openmla.DeviceInfo(), schedule_placement=1)
    openmla.sparse_decode(q, cache, indices, plan=sparse_plan)
    torch.ops.openmla.sparse_decode(q, cache, indices, None, None, None, 0.1, 512, 0, 0, 0, False, 2)
    assert seen == [2, 1, 1, 2]
    schema = str(torch.ops.openmla.dense_decode.default._schema)
    assert schema.split("->")[0].rstrip(") ").endswith("schedule_placement=0")


def test_bad_schedule_placement_names_the_op():
    # The op's own name, not the options struct's; and no cached config of a valid placement answers
    # for a value that compares equal to it (True == 1).
    from openmla._plans import run_config
    x = make_dense_inputs([100], h_q=16)
    for bad in (3, -1):
        with pytest.raises(ValueError, match=r"^dense_decode: argument 'schedule_placement' is not a placement"):
            torch.ops.openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, None, None, None, 0.1, False,
                                           512, 0, 0, 0, False, bad)
    q, cache, indices = _sparse_inputs()
    with pytest.raises(ValueError, match=r"^sparse_decode: argument 'schedule_placement' is not a placement"):
        torch.ops.openmla.sparse_decode(q, cache, indices, None, None, None, 0.1, 512, 0, 0, 0, False, 7)
    cpu = torch.device("cpu")
    run_config(cpu, 0, 0, 0, False, 1, "dense_decode")
    with pytest.raises(ValueError, match=r"^dense_decode: argument 'schedule_placement' is not a placement"):
        run_config(cpu, 0, 0, 0, False, True, "dense_decode")


def test_fake_dense_shapes_and_dtypes():
    with FakeTensorMode():
        q = torch.empty(4, 2, 128, 576, dtype=torch.bfloat16, device="cuda" if torch.cuda.is_available() else "cpu")
        kv = torch.empty(100, 64, 1, 576, dtype=torch.bfloat16, device=q.device)
        table = torch.empty(4, 25, dtype=torch.int32, device=q.device)
        lens = torch.empty(4, dtype=torch.int32, device=q.device)
        out, lse = torch.ops.openmla.dense_decode(q, kv, table, lens, None, None, None, 0.1, False, 512, 0, 0, 0)
        assert out.shape == (4, 2, 128, 512) and out.dtype == torch.bfloat16 and out.device == q.device
        assert lse.shape == (4, 128, 2) and lse.dtype == torch.float32
        q8 = q.to(torch.float8_e4m3fn)
        out8, _ = torch.ops.openmla.dense_decode(q8, kv.to(torch.float8_e4m3fn), table, lens, None, None, None, 0.1,
                                                 False, 512, 0, 0, 0)
        assert out8.dtype == torch.bfloat16


def test_fake_sparse_shapes():
    with FakeTensorMode():
        q = torch.empty(3, 2, 64, 576, dtype=torch.bfloat16)
        cache = torch.empty(10, 64, 1, 656, dtype=torch.uint8)
        idx = torch.empty(3, 2, 2048, dtype=torch.int32)
        out, lse = torch.ops.openmla.sparse_decode(q, cache, idx, None, None, None, 0.1, 512, 0, 0, 0)
        assert out.shape == (3, 2, 64, 512) and lse.shape == (3, 64, 2)
        qp = torch.empty(7, 64, 576, dtype=torch.bfloat16)
        kv = torch.empty(100, 1, 576, dtype=torch.bfloat16)
        out, max_logits, lse = torch.ops.openmla.sparse_prefill(qp, kv, torch.empty(7, 1, 32, dtype=torch.int32),
                                                                None, None, 0.1, 512)
        assert out.shape == (7, 64, 512) and max_logits.shape == (7, 64) and lse.shape == (7, 64)


def test_opcheck_dense():
    x = make_dense_inputs([0, 9, 40], s_q=2, h_q=8, page_size=16)
    torch.library.opcheck(torch.ops.openmla.dense_decode.default, _dense_args(x))
    workspace = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table).alloc_workspace()
    torch.library.opcheck(torch.ops.openmla.dense_decode.default, _dense_args(x, workspace=workspace))


def test_opcheck_sparse():
    q, cache, idx = _sparse_inputs()
    torch.library.opcheck(torch.ops.openmla.sparse_decode.default, (q, cache, idx, None, None, None, 0.05, 512, 0, 0, 0))
    qp = torch.randn(3, 8, 576).bfloat16()
    kv = torch.randn(50, 1, 576).bfloat16()
    torch.library.opcheck(torch.ops.openmla.sparse_prefill.default,
                          (qp, kv, random_indices((3, 1, 16), 50), None, None, 0.05, 512))


def test_op_matches_python_api():
    x = make_dense_inputs([12, 31], s_q=2, h_q=16, page_size=16)
    out_op, lse_op = torch.ops.openmla.dense_decode(*_dense_args(x))
    out, lse = openmla.dense_decode(x.q, x.kv_cache, x.block_table, x.seqlens, softmax_scale=0.05, causal=True)
    assert torch.equal(out, out_op) and torch.equal(lse, lse_op)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_cpu(backend):
    x = make_dense_inputs([12, 31, 0], s_q=2, h_q=16, page_size=16, capacity=[16, 40, 0])
    plan = openmla.DensePlan.for_tensors(x.q, x.kv_cache, x.block_table)
    workspace = plan.alloc_workspace()

    def step(q, kv, table, lens, ws):
        out, lse = openmla.dense_decode(q, kv, table, lens, plan=plan, workspace=ws, causal=True)
        return out.float() * 2, lse

    compiled = torch.compile(step, backend=backend, fullgraph=True)
    out, lse = compiled(x.q, x.kv_cache, x.block_table, x.seqlens, workspace)
    out_eager, lse_eager = step(x.q, x.kv_cache, x.block_table, x.seqlens, workspace)
    assert torch.equal(out, out_eager) and torch.equal(lse, lse_eager)
    # New lengths (within the pages each request holds), same shapes: new results.
    lens = torch.tensor([16, 37, 0], dtype=torch.int32)
    out2, lse2 = compiled(x.q, x.kv_cache, x.block_table, lens, workspace)
    out2_eager, lse2_eager = step(x.q, x.kv_cache, x.block_table, lens, workspace)
    assert torch.equal(out2, out2_eager) and torch.equal(lse2, lse2_eager)
