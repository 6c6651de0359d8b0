"""The fused LSTM recurrences (the shipped `modeling_elmo.stacked_lstm`, the package's `packed_kernels.clipped_lstm`,
`ElmoBiLstm.fused_forward`) against the reference loop: outputs, final states and every gradient with both clips
active, in every form they run in (stacked, one direction at a time with public or packed products, two threads,
compiled), dropout, the choice of implementation, and the model's mask-weighted forms for accelerators."""

from __future__ import annotations

import pytest
import torch
from support import assert_same_numbers
from support.model import SENTENCES, ElmoModelTester

from modeling_elmo import ElmoForBidirectionalLM
from modeling_elmo import modeling_elmo as modeling
from modeling_elmo.acceleration import packed_kernels
from modeling_elmo.acceleration.cpu_kernels import CpuKernels, PackedCpuKernels, on_threads
from modeling_elmo.acceleration.packed_kernels import RecurrencePlan, compile_failure
from modeling_elmo.modeling_elmo import ElmoLstmLayer, dropout_noise, stacked_lstm

#: Relative tolerance of fast against reference (fp32): the issue's 1e-5.
TOLERANCE = 1e-5
CELL_CLIP, PROJ_CLIP = 0.5, 0.4


def clipped_lstm(x, valid, layers, state=None, plan=None):
    """The package's `packed_kernels.clipped_lstm` on the tensors and clips of ``layers`` (`ElmoLstmLayer`s)."""
    weights = [
        (ls.input_transform.weight, ls.input_transform.bias, ls.recurrent_transform.weight, ls.projection.weight)
        for ls in layers
    ]
    clips = {"cell_clip": layers[0].cell_clip, "proj_clip": layers[0].proj_clip}
    return packed_kernels.clipped_lstm(x, valid, weights, state, plan=plan, **clips)


def package_form(model):
    """``model`` running the installed package's kernels (``config.use_packed_kernels``, the default)."""
    model.config.use_packed_kernels = True
    return model


def clipping_pair(cls=None, **overrides):
    """The same tiny model twice (reference loop, fused), weights scaled so that both clips trigger often."""
    tester = ElmoModelTester(cell_clip=CELL_CLIP, proj_clip=PROJ_CLIP, **overrides)
    models = []
    for implementation in ("loop", "fused"):
        model = (
            tester.model(cls, seed=3, lstm_implementation=implementation)
            if cls
            else tester.model(seed=3, lstm_implementation=implementation)
        )
        with torch.no_grad():
            for parameter in (model.encoder if cls is None else model.elmo.encoder).parameters():
                parameter.mul_(3.0)
        models.append(model)
    return tester, models


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def kernels_named(name: str) -> CpuKernels:
    """The CPU kernels of a test's form: the public-API ones, or the package's packed ones."""
    if name == "public":
        return CpuKernels()
    if not packed_kernels.available():
        pytest.skip("this torch build has neither oneDNN's nor MKL's packed products (not an x86 build)")
    return PackedCpuKernels()


@pytest.fixture(params=["shipped", "package", "package-threads"])
def cpu_form(request, monkeypatch):
    """How a model's fused path runs: the shipped `stacked_lstm` (a model loaded as remote code), the package's
    `clipped_lstm` as it runs small models (stacked, explicit backward), or as it runs large ones, forced on the
    tiny test model: one direction per thread on packed products. Yields a function that sets it on a model."""
    if request.param == "package-threads":
        monkeypatch.setattr(RecurrencePlan, "PER_DIRECTION_FROM", 0)
        monkeypatch.setattr(packed_kernels, "default_cpu_kernels", lambda: kernels_named("packed"))
        before = torch.get_num_threads()
        torch.set_num_threads(2)
        yield package_form
        torch.set_num_threads(before)
        return
    yield shipped_form if request.param == "shipped" else package_form


def shipped_form(model):
    """``model`` running the shipped `stacked_lstm` in every mode (the package's form switched off)."""
    model.config.use_packed_kernels = False
    return model


@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
@pytest.mark.parametrize("batching", ["sentences", "windows"])
def test_fused_model_equals_the_loop_in_outputs_states_and_every_gradient_with_both_clips_active(
    batching, stateful, cpu_form
):
    tester, (loop, fused) = clipping_pair()
    fused = cpu_form(fused)
    enc = tester.encode(SENTENCES)  # lengths 6, 3, 2, 5: padded rows of different lengths
    options = {} if batching == "sentences" else {"add_sentence_boundaries": False}
    weights = torch.randn(4, 3, enc["input_ids"].shape[1], 16, generator=torch.Generator().manual_seed(1))
    results = []
    for model in (loop, fused):
        state = None
        if stateful:  # start from the states another batch left
            with torch.no_grad():
                state = model(**tester.encode(SENTENCES[::-1]), return_lstm_state=True, **options).lstm_state
        out = model(**enc, output_hidden_states=True, lstm_state=state, return_lstm_state=True, **options)
        (torch.stack(out.hidden_states, dim=1) * weights).sum().backward()
        out.hidden_states = tuple(h.detach() for h in out.hidden_states)
        results.append((out, gradients(model)))
    (expected, expected_grads), (actual, actual_grads) = results
    for layer, (a, e) in enumerate(zip(actual.hidden_states, expected.hidden_states, strict=False)):
        assert_same_numbers(a, e, rtol=TOLERANCE, what=f"layer {layer}")
    assert_same_numbers(actual.lstm_state.hidden, expected.lstm_state.hidden, rtol=TOLERANCE, what="final h")
    assert_same_numbers(actual.lstm_state.cell, expected.lstm_state.cell, rtol=TOLERANCE, what="final c")
    assert expected_grads.keys() == actual_grads.keys() and sum(n.startswith("encoder.") for n in actual_grads) == 16
    for name, grad in expected_grads.items():
        assert_same_numbers(actual_grads[name], grad, rtol=TOLERANCE, what=name)
    # both clips really act here
    assert (expected.hidden_states[1].abs() >= PROJ_CLIP - 1e-6).float().mean() > 0.05
    assert (expected.lstm_state.cell.abs() >= CELL_CLIP - 1e-6).float().mean() > 0.05


def test_fused_model_under_bf16_autocast_is_as_close_to_fp32_as_the_loop(cpu_form):
    tester, (loop, fused) = clipping_pair()
    fused = cpu_form(fused)
    enc = tester.encode(SENTENCES)
    exact = loop(**enc, output_hidden_states=True).hidden_states
    errors = {}
    for name, model in (("loop", loop), ("fused", fused)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            layers = model(**enc, output_hidden_states=True).hidden_states  # autograd on: the training path
        errors[name] = max(
            float((a.detach().float() - e.detach()).abs().max()) for a, e in zip(layers[1:], exact[1:], strict=False)
        )
    assert 0 < errors["fused"] <= 2 * errors["loop"], errors


@pytest.mark.parametrize("implementation", ["loop", "fused"])
def test_inference_under_bf16_autocast_runs_and_stays_close_to_fp32(implementation, cpu_form):
    tester = ElmoModelTester()
    model = cpu_form(tester.model(seed=2, lstm_implementation=implementation))
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        exact = model(**enc).last_hidden_state
        with torch.autocast("cpu", dtype=torch.bfloat16):
            approximate = model(**enc).last_hidden_state  # packed fp32 weights must not meet bf16 states
    assert approximate.dtype == torch.bfloat16
    assert (approximate.float() - exact).abs().max() < 0.05 * exact.abs().max()


def reference_directions(layers, x, mask, h0, c0):
    """`ElmoLstmLayer.forward` (the loop) per direction: x (D, T, B, P) -> y (D, T, B, P), h, c."""
    ys, hs, cs = [], [], []
    for d, layer in enumerate(layers):
        y, (h, c) = layer(x[d], mask.t(), (h0[d], c0[d]))
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return torch.stack(ys), torch.stack(hs), torch.stack(cs)


PLANS = {
    "stacked": dict(),
    "per-direction": dict(per_direction=True),
    "two-threads": dict(per_direction=True, parallel=True),
    "compiled": dict(compiled=True, backend="aot_eager"),
}


#: (plan, CPU kernels): the packed kernels change the per-direction forms only (the stacked ones use ``bmm``);
#: "shipped" is `modeling_elmo.stacked_lstm`, the form of the files shipped with a model.
FORMS = (
    [("shipped", "public")]
    + [(plan, "public") for plan in PLANS]
    + [("per-direction", "packed"), ("two-threads", "packed")]
)


@pytest.mark.parametrize("grad", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize(
    ("plan", "form"),
    [  # the compiled plan compiles (torch.compile): slow
        pytest.param(plan, form, id=f"{plan}-{form}", marks=[pytest.mark.slow] if plan == "compiled" else [])
        for plan, form in FORMS
    ],
)
def test_every_form_of_the_fused_recurrence_equals_the_reference_layer_loop(plan, form, grad):
    torch.manual_seed(0)
    P, H, B, T = 8, 16, 5, 7
    layers = [ElmoLstmLayer(P, H, P, CELL_CLIP, PROJ_CLIP) for _ in range(2)]
    for layer in layers:
        for parameter in layer.parameters():
            torch.nn.init.uniform_(parameter, -1.0, 1.0)
    x = torch.randn(2, T, B, P, requires_grad=grad)
    lengths = torch.tensor([7, 3, 0, 5, 1])  # an empty row too: it keeps its state
    valid = torch.arange(T)[:, None] < lengths[None]  # (T, B)
    h0 = torch.randn(2, B, P, requires_grad=grad)
    c0 = torch.randn(2, B, H, requires_grad=grad)
    upstream = [torch.randn(2, T, B, P), torch.randn(2, B, P), torch.randn(2, B, H)]
    inputs = [x, h0, c0] + [p for layer in layers for p in layer.parameters()]

    def run(fn):
        with torch.set_grad_enabled(grad):
            outputs = fn()
        if not grad:
            return list(outputs)
        loss = sum((out * g).sum() for out, g in zip(outputs, upstream, strict=False))
        return [out.detach() for out in outputs] + list(torch.autograd.grad(loss, inputs))

    expected = run(lambda: reference_directions(layers, x, valid.t(), h0, c0))
    if plan == "shipped":
        actual = run(lambda: (lambda y, hc: (y, *hc))(*stacked_lstm(x, valid, layers, (h0, c0))))
    else:
        chosen = RecurrencePlan(**PLANS[plan], kernels=kernels_named(form))
        actual = run(lambda: (lambda y, hc: (y, *hc))(*clipped_lstm(x, valid, layers, (h0, c0), plan=chosen)))
    names = ["y", "h", "c", "x", "h0", "c0"] + [f"{d}.{n}" for d in (0, 1) for n, _ in layers[d].named_parameters()]
    assert len(actual) == len(expected) == (len(names) if grad else 3)
    for name, a, e in zip(names, actual, expected, strict=False):
        assert_same_numbers(a, e, rtol=TOLERANCE, what=name)
    assert (expected[0].abs() >= PROJ_CLIP - 1e-6).any()
    if plan == "compiled":
        assert compile_failure("aot_eager") is None  # the compiled steps really ran


@pytest.mark.parametrize("block", [1, 3, 7])
@pytest.mark.parametrize(
    ("plan", "form"), [("shipped", "public"), ("per-direction", "packed"), ("two-threads", "packed")]
)
def test_input_products_in_blocks_of_steps_give_the_numbers_of_all_steps_at_once(plan, form, block, monkeypatch):
    """The fast inference forms compute the input products `steps_per_input_product` steps at a time (memory
    bounded for long sentences): blocks of 1, 3 (the last one short) and all 7 steps give the reference loop's
    outputs and final states; the bound holds at least one step and about 2**22 numbers."""
    torch.manual_seed(0)
    P, H, B, T = 8, 16, 5, 7
    layers = [ElmoLstmLayer(P, H, P, CELL_CLIP, PROJ_CLIP) for _ in range(2)]
    for parameter in (p for layer in layers for p in layer.parameters()):
        torch.nn.init.uniform_(parameter, -1.0, 1.0)
    x, h0, c0 = torch.randn(2, T, B, P), torch.randn(2, B, P), torch.randn(2, B, H)
    valid = torch.arange(T)[:, None] < torch.tensor([7, 3, 0, 5, 1])[None]
    blocks = []
    module = modeling if plan == "shipped" else packed_kernels  # each form's own rule, the same in both
    monkeypatch.setattr(module, "steps_per_input_product", lambda rows, gates: blocks.append(rows) or block)
    with torch.no_grad():
        expected = reference_directions(layers, x, valid.t(), h0, c0)
        if plan == "shipped":
            y, (h, c) = stacked_lstm(x, valid, layers, (h0, c0))
        else:
            chosen = RecurrencePlan(**PLANS[plan], kernels=kernels_named(form))
            y, (h, c) = clipped_lstm(x, valid, layers, (h0, c0), plan=chosen)
    assert blocks and set(blocks) == {B}  # the blocked code ran
    for name, a, e in zip("yhc", (y, h, c), expected, strict=True):
        assert_same_numbers(a, e, rtol=TOLERANCE, what=name)
    monkeypatch.undo()
    for rule in (modeling.steps_per_input_product, packed_kernels.steps_per_input_product):
        for rows, gates in [(32, 16384), (8, 16384), (1, 64), (10**6, 16384)]:
            steps = rule(rows, gates)
            assert steps >= 1 and (steps == 1 or steps * rows * gates <= 2**22 < (steps + 1) * rows * gates)
        assert rule(32, 16384) == 8


def test_fused_dropout_drops_the_same_units_as_the_loop_when_seeded_alike(cpu_form):
    tester, (loop, fused) = clipping_pair()
    fused = cpu_form(fused)
    enc = tester.encode(SENTENCES)
    outputs = []
    for model in (loop, fused):
        model.train()
        torch.manual_seed(11)
        hidden = model(**enc, output_hidden_states=True, lstm_dropout=0.4).hidden_states  # training: autograd on
        outputs.append([h.detach() for h in hidden])
    with torch.no_grad():
        plain = fused.eval()(**enc, output_hidden_states=True).hidden_states
    for layer in (1, 2):
        assert_same_numbers(outputs[1][layer], outputs[0][layer], rtol=TOLERANCE, what=f"layer {layer}")
        assert (outputs[1][layer] - plain[layer]).abs().max() > 1e-2  # dropout did act


def test_dropout_noise_keeps_each_unit_with_probability_one_minus_p_and_rescales_it():
    torch.manual_seed(0)
    noise = dropout_noise(torch.empty(64, 50, 32), 0.25, num_layers=2)
    assert len(noise) == 2 and all(tuple(n.shape) == (2, 50, 64, 32) for n in noise)
    values = torch.cat([n.flatten() for n in noise])
    kept = values.unique()
    assert len(kept) == 2 and kept[0] == 0 and abs(kept[1].item() - 1 / 0.75) < 1e-6
    assert abs((values == 0).float().mean().item() - 0.25) < 0.01  # 409,600 draws: the standard error is 0.0007
    masks = [n[d] for n in noise for d in (0, 1)]
    assert all(not torch.equal(a, b) for i, a in enumerate(masks) for b in masks[i + 1 :])  # independent draws
    assert dropout_noise(torch.empty(2, 3, 4), 0.0, 2) is None


def test_auto_uses_the_loop_where_the_fused_recurrence_does_not_apply_and_hides_no_error(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the fused recurrence (test)")

    tester, (loop, fused) = clipping_pair()
    auto = shipped_form(tester.model(seed=3, lstm_implementation="auto"))
    auto.load_state_dict(fused.state_dict())
    shipped_form(fused)
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        expected = loop(**enc).last_hidden_state
        monkeypatch.setattr(modeling, "fused_applies", lambda device, dtype: False)  # say, an MPS device
        monkeypatch.setattr(modeling, "stacked_lstm", broken)
        assert torch.equal(auto(**enc).last_hidden_state, expected)  # the loop, chosen before running anything
        monkeypatch.setattr(modeling, "fused_applies", lambda device, dtype: True)
        with pytest.raises(RuntimeError, match="a bug in the fused recurrence"):  # a failure is not a fallback
            auto(**enc)
        with pytest.raises(RuntimeError, match="a bug in the fused recurrence"):
            fused(**enc)


def test_the_fused_recurrence_applies_to_floating_point_inputs_on_the_cpu_and_cuda_only():
    applies = modeling.fused_applies
    assert applies(torch.device("cpu"), torch.float32) and applies(torch.device("cpu"), torch.bfloat16)
    assert applies(torch.device("cuda", 0), torch.float16)
    assert not applies(torch.device("mps"), torch.float32) and not applies(torch.device("xla"), torch.float32)
    assert not applies(torch.device("cpu"), torch.int64)


@pytest.mark.slow  # torch.compile
def test_compiled_steps_that_fail_to_build_fall_back_to_plain_steps_and_are_not_retried():
    attempts = []

    def broken_backend(graph, example_inputs):
        attempts.append(1)
        raise RuntimeError("no compiler on this machine")

    torch.manual_seed(0)
    layers = [ElmoLstmLayer(4, 8, 4, CELL_CLIP, PROJ_CLIP) for _ in range(2)]
    for layer in layers:
        for parameter in layer.parameters():
            torch.nn.init.uniform_(parameter, -1.0, 1.0)
    x, valid = torch.randn(2, 3, 2, 4), torch.ones(3, 2, dtype=torch.bool)
    plan = RecurrencePlan(compiled=True, backend=broken_backend)
    with torch.no_grad():
        y, _ = clipped_lstm(x, valid, layers, plan=plan)
        tried = len(attempts)
        again, _ = clipped_lstm(x, valid, layers, plan=plan)
        expected, _ = clipped_lstm(x, valid, layers, plan=RecurrencePlan())
    assert tried >= 1 and len(attempts) == tried  # one failure, then no new attempt
    assert "forward step" in compile_failure(broken_backend) and "no compiler on this machine" in compile_failure(
        broken_backend
    )
    assert_same_numbers(y, expected, rtol=TOLERANCE)
    assert_same_numbers(again, expected, rtol=TOLERANCE)
    # in training the backward step's compilation fails on its own, and the gradients are still right
    grads = []
    for each in (plan, RecurrencePlan()):
        x.grad = None
        x.requires_grad_(True)
        clipped_lstm(x, valid, layers, plan=each)[0].square().sum().backward()
        grads.append(x.grad.clone())
    assert "backward step" in compile_failure(broken_backend)
    assert_same_numbers(grads[0], grads[1], rtol=TOLERANCE)


@pytest.mark.slow  # torch.compile
def test_compiled_steps_build_one_graph_for_every_step_length_and_batch_size():
    """Dynamo specialises on ints and on slice offsets: a graph per time step would recompile until its limit and
    fall back to uncompiled steps; the steps get whole tensors and an index tensor instead."""
    graphs = []

    def counting_backend(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch.manual_seed(0)
    layers = [ElmoLstmLayer(3, 5, 3, CELL_CLIP, PROJ_CLIP) for _ in range(2)]
    plan = RecurrencePlan(compiled=True, backend=counting_backend)
    # sizes that never coincide (dynamo also specialises on two sizes that happen to be equal: one more graph)
    for steps, rows in ((9, 6), (13, 7), (11, 17)):
        x = torch.randn(2, steps, rows, 3, requires_grad=True)
        y, (h, c) = clipped_lstm(x, torch.ones(steps, rows, dtype=torch.bool), layers, plan=plan)
        (y.sum() + h.sum() + c.sum()).backward()
    assert compile_failure(counting_backend) is None
    assert len(graphs) == 2  # one forward step, one backward step


def test_directions_on_two_threads_leave_the_callers_thread_count_and_only_large_models_use_them():
    packed = kernels_named("packed")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        layers = [ElmoLstmLayer(4, 8, 4, CELL_CLIP, PROJ_CLIP) for _ in range(2)]
        for layer in layers:
            torch.nn.init.uniform_(layer.recurrent_transform.weight, -1.0, 1.0)
        with torch.no_grad():
            clipped_lstm(
                torch.randn(2, 3, 2, 4),
                torch.ones(3, 2, dtype=torch.bool),
                layers,
                plan=RecurrencePlan(per_direction=True, parallel=True, kernels=packed),
            )
        assert torch.get_num_threads() == 2
        plan = RecurrencePlan.for_device(torch.device("cpu"), 2, 4096 * 1024)
        assert plan.per_direction and plan.parallel and plan.kernels.name == "packed"
    finally:
        torch.set_num_threads(before)
    torch.set_num_threads(1)
    try:
        plan = RecurrencePlan.for_device(torch.device("cpu"), 2, 4096 * 1024)
        assert plan.per_direction and not plan.parallel
        assert not RecurrencePlan.for_device(torch.device("cpu"), 2, 128 * 16).per_direction  # small: stacked
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("training", [True, False], ids=["sampled-training", "full-eval"])
def test_the_mask_weighted_accelerator_forms_give_the_cpu_selections_numbers(monkeypatch, training):
    """On an accelerator the model encodes every position and weights the LM loss instead of selecting rows (which
    would make the host wait); the numbers must be those of the selecting form."""
    tester, (_, model) = clipping_pair(ElmoForBidirectionalLM)
    enc = tester.encode(SENTENCES)
    labels = torch.randint(4, 40, enc["attention_mask"].shape).masked_fill(enc["attention_mask"] == 0, -100)
    labels[0, 2] = -100  # an ignored word inside a sentence
    model.train(training)
    results = []
    for host_selects in (True, False):
        monkeypatch.setattr(modeling, "_host_waits_for_nothing", lambda device, value=host_selects: value)
        model.zero_grad()
        torch.manual_seed(2)  # the same negative sample
        out = model(**enc, labels=labels)
        out.loss.backward()
        results.append(({k: v.detach() for k, v in out.items() if k != "last_hidden_state"}, gradients(model)))
    (expected, expected_grads), (actual, actual_grads) = results
    for field in ("loss", "forward_nll_sum", "backward_nll_sum"):
        assert_same_numbers(actual[field], expected[field], rtol=TOLERANCE, what=field)
    assert int(actual["num_forward_targets"]) == int(expected["num_forward_targets"]) == 16 + 4 - 1
    assert int(actual["num_backward_targets"]) == int(expected["num_backward_targets"])
    for name, grad in expected_grads.items():
        assert_same_numbers(actual_grads[name], grad, rtol=TOLERANCE, what=name)


def test_shipped_kernels_module_imports_nothing_optional_at_import_time():
    source = modeling.__file__
    with open(source, encoding="utf-8") as handle:
        text = handle.read()
    assert "import triton" not in text  # the compiler is reached through torch.compile only
    from modeling_elmo.hub import audit_shipped_code

    assert audit_shipped_code([source]) == []


def test_auto_runs_the_fused_recurrence_when_clipping_or_carrying_state_and_torch_lstm_otherwise():
    clipped = shipped_form(ElmoModelTester(cell_clip=CELL_CLIP, proj_clip=PROJ_CLIP).model())
    unclipped = shipped_form(ElmoModelTester(cell_clip=None, proj_clip=None).model())
    x = torch.zeros(2, 3, unclipped.config.projection_dim)
    assert clipped.encoder.recurrence_for(x, stateless=True) is modeling.stacked_lstm
    assert unclipped.encoder.recurrence_for(x, stateless=True) is modeling.torch_lstm
    assert unclipped.encoder.recurrence_for(x, stateless=False) is modeling.stacked_lstm  # a state to carry
    assert package_form(clipped).encoder.recurrence_for(x, stateless=True) is modeling.packed_lstm
    enc = ElmoModelTester().encode(SENTENCES)
    with torch.no_grad():  # and the forward runs the chosen one
        calls = []
        clipped.encoder.recurrence = lambda *args: calls.append(len(args)) or modeling.stacked_lstm(*args)
        clipped(**enc)
    assert calls == [4] * clipped.config.num_hidden_layers


@pytest.mark.slow
def test_gpu_check_script_runs_every_step_in_cpu_smoke_mode(tmp_path):
    """The one-shot GPU script's plumbing (every step, its time limits, the summary), on tiny CPU settings: about a
    minute, so that the GPU session it is written for does not spend its device time on a broken script."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path))
    result = subprocess.run(
        ["bash", str(repo / "scripts" / "bench" / "gpu_checks.sh"), "--cpu-smoke", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out"
    assert len(list(out.iterdir())) <= 8  # what the device tool brings back
    summary = json.loads((out / "summary.json").read_text())
    failed = [s for s in summary["steps"] if s["exit"] != 0]
    assert not failed, (failed, (out / "stderr.log").read_text()[-3000:])
    assert [s["step"] for s in summary["steps"]] == [
        "environment",
        "correctness",
        "pretrain_gpu",
        "trainer",
        "embed_gpu",
    ]
    assert summary["correctness"]["fp32_parity_ok"] is True
    assert summary["correctness"]["bf16_max_abs_difference"] < 0.1
    assert set(summary["pretrain_gpu"]) >= {"loop@8", "fused@8", "loop@16", "fused@16", "fused_over_loop"}
    assert summary["trainer"]["windows"] > 0 and summary["trainer"]["sentences"] > 0
    assert summary["embed_gpu"]["tiny"]["sentences_per_second"] > 0
    assert not list(tmp_path.glob("elmo-gpu-checks.*"))  # the trainer runs' folder is removed


def test_the_packed_form_is_chosen_per_model_also_for_remote_code_and_computes_the_same(tmp_path, monkeypatch):
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    monkeypatch.setattr(RecurrencePlan, "PER_DIRECTION_FROM", 0)  # the per-direction form, where the kernels act
    tester = ElmoModelTester(cell_clip=CELL_CLIP, proj_clip=PROJ_CLIP)
    tester.model(seed=5).save_pretrained(tmp_path / "m")
    # the folder's own code, as trust_remote_code loads it where the package's classes are not registered
    remote_class = get_class_from_dynamic_module("modeling_elmo.ElmoModel", str(tmp_path / "m"))
    remote = remote_class.from_pretrained(tmp_path / "m").eval()
    other = remote_class.from_pretrained(tmp_path / "m").eval()
    assert type(remote).__module__.startswith("transformers_modules.")
    enc = tester.encode(SENTENCES)
    calls = []
    monkeypatch.setattr(
        packed_kernels, "packed_lstm", lambda *a, _run=packed_kernels.packed_lstm, **k: calls.append(1) or _run(*a, **k)
    )
    other.config.use_packed_kernels = False
    with torch.no_grad():
        public = other(**enc).last_hidden_state
        assert not calls  # the shipped form where switched off ...
        packed = remote(**enc).last_hidden_state
        assert calls  # ... the package's form found by the folder's own code
    assert_same_numbers(packed, public, rtol=TOLERANCE, what="packed against public form")
    calls.clear()
    remote.train()(**enc).last_hidden_state.sum().backward()
    assert calls  # in training too ...
    calls.clear()
    other.train()(**enc)
    assert not calls  # ... and only where the config says so


def test_the_shipped_model_holds_no_module_state_and_importing_the_package_changes_no_model():
    import types

    state = {
        name
        for name, value in vars(modeling).items()
        if not name.startswith("__")
        and name != "annotations"  # the __future__ feature
        and not isinstance(value, (types.FunctionType, types.ModuleType, type))
        and not callable(value)
    }
    # constants only (labels to ignore, word ids): nothing that decides how a model computes
    expected = {"IGNORE_INDEX", "PAD_ID", "BOS_ID", "EOS_ID"}
    assert state == expected, state
    model = ElmoModelTester().model()
    packed_kernels.available()  # the package module is imported and used ...
    assert model.encoder.recurrence is None  # ... and only the model's config chooses its recurrence
    x = torch.zeros(2, 3, 1, model.config.projection_dim)
    assert model.encoder.recurrence_for(x, stateless=True) is modeling.packed_lstm
    assert shipped_form(model).encoder.recurrence_for(x, stateless=True) is modeling.stacked_lstm
    with torch.no_grad():
        assert shipped_form(model).encoder.recurrence_for(x, stateless=True) is modeling.stacked_lstm  # inference too


def bf16_error_on_long_sentences(implementation: str = "fused", make_form=lambda model: model) -> list[float]:
    """Per layer, the largest difference of a bfloat16 copy of a model from the float32 model, over that layer's
    standard deviation, on 44- to 50-word sentences. The model remembers long (forget gates biased open), so that
    rounding the carried cell at every step would add up along the sentences."""
    tester = ElmoModelTester(projection_dim=32, cell_size=64, cell_clip=3.0, proj_clip=3.0)
    model = make_form(tester.model(seed=3, lstm_implementation=implementation))
    with torch.no_grad():
        for layer in [*model.encoder.forward_layers, *model.encoder.backward_layers]:
            layer.input_transform.bias[layer.cell_size : 2 * layer.cell_size] += 6.0
    words = torch.Generator().manual_seed(0)
    letters = "abcdefghij"
    sentences = [
        ["".join(letters[int(i)] for i in torch.randint(10, (2 + int(n) % 7,), generator=words)) for n in range(length)]
        for length in (50, 47, 44)
    ]
    enc = tester.encode(sentences)
    with torch.no_grad():
        exact = model(**enc, output_hidden_states=True).hidden_states
        approximate = model.to(torch.bfloat16)(**enc, output_hidden_states=True).hidden_states
    return [float((a.float() - e).abs().max() / e.std()) for a, e in zip(approximate, exact, strict=True)]


@pytest.mark.parametrize("form", ["loop", "shipped", "package", "package-threads"])
def test_bf16_models_stay_within_five_hundredths_of_a_std_of_fp32_on_50_word_sentences(form, monkeypatch):
    threads = torch.get_num_threads()
    if form == "package-threads":  # as the package runs large models: one direction per thread
        monkeypatch.setattr(RecurrencePlan, "PER_DIRECTION_FROM", 0)
        torch.set_num_threads(2)
    try:
        if form in ("loop", "shipped"):
            errors = bf16_error_on_long_sentences("loop" if form == "loop" else "fused", shipped_form)
        else:
            errors = bf16_error_on_long_sentences("fused", package_form)
    finally:
        torch.set_num_threads(threads)
    assert max(errors) < 0.05, errors


def test_bf16_error_on_long_sentences_comes_from_a_rounded_state(monkeypatch):
    """The control: with the state, cell and gate sums in bfloat16 too, the same measure exceeds the bound."""
    monkeypatch.setattr(modeling, "state_dtype", lambda dtype: dtype)
    monkeypatch.setattr(packed_kernels, "state_dtype", lambda dtype: dtype)  # each form's own rule
    assert max(bf16_error_on_long_sentences("fused", shipped_form)) > 0.06
    assert max(bf16_error_on_long_sentences("fused", package_form)) > 0.06


def test_on_threads_runs_the_first_piece_on_the_calling_thread_and_the_others_on_workers_in_order():
    import threading

    threads = torch.get_num_threads()
    seen = on_threads(lambda i: (i, threading.get_ident(), torch.get_num_threads()), 3)
    assert [i for i, _, _ in seen] == [0, 1, 2]
    assert seen[0][1] == threading.get_ident()  # the caller works too: one thread (and allocator arena) fewer
    assert all(ident != threading.get_ident() for _, ident, _ in seen[1:])
    assert all(count == 1 for _, _, count in seen)  # one intra-op thread per piece
    assert torch.get_num_threads() == threads  # the caller's setting back


@pytest.mark.parametrize("name", ["public_threads", "public_columns"])
def test_the_benchmarked_public_prototypes_compute_the_shipped_recurrences_numbers(name, monkeypatch):
    """`scripts/prototypes/public_prototypes.py` (measured by ``bench_forward.py --forms NAME``) gives `stacked_lstm`'s
    outputs and final states, from zeros and from a carried state, with padded rows."""
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "scripts" / "prototypes"))
    prototype = __import__("public_prototypes").PROTOTYPES[name]
    sys.modules.pop("public_prototypes", None)
    torch.manual_seed(0)
    P, H, B, T = 8, 16, 5, 7
    layers = [ElmoLstmLayer(P, H, P, CELL_CLIP, PROJ_CLIP) for _ in range(2)]
    for parameter in (p for layer in layers for p in layer.parameters()):
        torch.nn.init.uniform_(parameter, -1.0, 1.0)
    x = torch.randn(2, T, B, P)
    valid = torch.arange(T)[:, None] < torch.tensor([7, 3, 0, 5, 1])[None]
    for state in (None, (torch.randn(2, B, P), torch.randn(2, B, H))):
        with torch.no_grad():
            expected, (h, c) = stacked_lstm(x, valid, layers, state)
            actual, (h2, c2) = prototype(x, valid, layers, state)
        for what, a, e in (("y", actual, expected), ("h", h2, h), ("c", c2, c)):
            assert_same_numbers(a, e, rtol=TOLERANCE, what=what)
