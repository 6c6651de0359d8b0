"""The LSTM as modules: PEFT adapters on its transforms, hooks, folders saved with the older parameter names and
their upgrade, gradient checkpointing, `torch.compile(fullgraph=True)`, and misused `lstm_state`s."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import assert_same_numbers
from support.model import (
    CELL_CLIP,
    LEGACY_NAMES,
    PROJ_CLIP,
    SENTENCES,
    ElmoModelTester,
    clipping_model,
    write_legacy_folder,
)

from modeling_elmo import ElmoForBidirectionalLM, ElmoLstmState, ElmoModel, save_model_folder
from modeling_elmo import modeling_elmo as modeling
from modeling_elmo.utils.earlier_formats import legacy_keys, renamed_legacy_key

TOLERANCE = 1e-5
LSTM_LINEARS = ("input_transform", "recurrent_transform", "projection")


# ------------------------------------------------------------------------------------------------- PEFT adapters
def lora_model(model, target_modules="all-linear"):
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=target_modules, init_lora_weights=False)
    return peft.get_peft_model(model, config)


def test_all_linear_lora_reaches_every_lstm_transform_and_the_character_encoder_linears():
    _, model = clipping_model()
    wrapped = lora_model(model)
    adapted = {
        name.removeprefix("base_model.model.")
        for name, module in wrapped.named_modules()
        if hasattr(module, "lora_A") and hasattr(module, "base_layer")
    }
    for direction in ("forward", "backward"):
        for layer in range(2):
            for linear in LSTM_LINEARS:
                assert f"encoder.{direction}_layers.{layer}.{linear}" in adapted, sorted(adapted)
    assert "char_encoder.projection" in adapted and "char_encoder.highways.0.gate" in adapted


@pytest.mark.parametrize("implementation", ["auto", "fused", "loop"])
@pytest.mark.parametrize("form", ["shipped", "package"])
def test_lora_on_the_lstm_changes_the_output_trains_and_merges_to_the_same_numbers(implementation, form):
    tester, model = clipping_model(lstm_implementation=implementation)
    model.config.use_packed_kernels = form == "package"
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        plain = model(**enc).last_hidden_state
    wrapped = lora_model(model, target_modules=list(LSTM_LINEARS))
    adapted = wrapped(**enc).last_hidden_state
    assert (adapted.detach() - plain).abs().max() > 1e-3  # the adapters are applied, not skipped by a fast path
    adapted.square().sum().backward()
    lora = {n: p for n, p in wrapped.named_parameters() if "lora_" in n}
    assert lora and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora.values()), [
        n for n, p in lora.items() if p.grad is None or p.grad.abs().sum() == 0
    ]
    assert not any(p.grad is not None for n, p in wrapped.named_parameters() if "lora_" not in n)  # base frozen
    merged = wrapped.merge_and_unload()
    assert all(
        type(getattr(layer, linear)) is torch.nn.Linear
        for layer in merged.encoder.forward_layers
        for linear in LSTM_LINEARS
    )
    with torch.no_grad():
        assert_same_numbers(merged(**enc).last_hidden_state, adapted.detach(), rtol=TOLERANCE, what="merged")


def test_lora_on_the_character_convolutions_computes_the_adapted_weights_trains_and_merges():
    """PEFT wraps an `ElmoCharConvolution` as it wraps a `Conv1d` (its adapter convolutions made by the same class);
    the adapted model computes what the model with the weights ``W + scale * B A`` computes, eager and in pieces."""
    tester, model = clipping_model()
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        plain = model(**enc).last_hidden_state
    wrapped = lora_model(model, target_modules=["convolutions.0", "convolutions.2"])
    with torch.no_grad():  # the CPU inference path (pieces sized from the filters), then with autograd
        adapted = wrapped(**enc).last_hidden_state
    adapted_grad = wrapped(**enc).last_hidden_state
    assert_same_numbers(adapted_grad.detach(), adapted, rtol=TOLERANCE, what="with autograd")
    by_hand = ElmoModelTester(cell_clip=CELL_CLIP, proj_clip=PROJ_CLIP).model(ElmoModel)
    by_hand.load_state_dict(clipping_model()[1].state_dict())
    for index in (0, 2):
        lora = wrapped.base_model.model.char_encoder.convolutions[index]
        a, b = lora.lora_A["default"].weight, lora.lora_B["default"].weight  # (r, d_c, w), (filters, r, 1)
        delta = torch.einsum("fr,rcw->fcw", b[..., 0], a) * lora.scaling["default"]
        with torch.no_grad():
            by_hand.char_encoder.convolutions[index].weight.add_(delta)
    with torch.no_grad():
        expected = by_hand(**enc).last_hidden_state
    assert (expected - plain).abs().max() > 1e-4  # the adapters change the output
    assert_same_numbers(adapted, expected, rtol=TOLERANCE, what="LoRA on the convolutions")
    adapted_grad.square().sum().backward()
    lora_grads = {n: p.grad for n, p in wrapped.named_parameters() if "lora_" in n}
    assert len(lora_grads) == 4 and all(g is not None and g.abs().sum() > 0 for g in lora_grads.values())
    merged = wrapped.merge_and_unload()
    assert all(type(conv) is modeling.ElmoCharConvolution for conv in merged.char_encoder.convolutions)
    with torch.no_grad():
        assert_same_numbers(merged(**enc).last_hidden_state, expected, rtol=TOLERANCE, what="merged")


def test_a_character_convolution_with_padding_or_stride_computes_what_conv1d_computes():
    x = torch.randn(3, 4, 9)
    for options in ({"padding": 1}, {"stride": 2}, {"dilation": 2}, {}):
        torch.manual_seed(0)
        ours = modeling.ElmoCharConvolution(4, 5, 3, **options)
        torch.manual_seed(0)
        plain = torch.nn.Conv1d(4, 5, 3, **options)
        assert_same_numbers(ours(x), plain(x), rtol=TOLERANCE, what=str(options))


def test_a_hooked_lstm_transform_is_computed_through_the_module():
    tester, model = clipping_model()
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        plain = model(**enc).last_hidden_state
        handle = model.encoder.backward_layers[1].projection.register_forward_hook(lambda m, i, out: out * 0.5)
        hooked = model(**enc).last_hidden_state
        handle.remove()
    assert (hooked - plain)[..., 8:].abs().max() > 1e-3  # the backward half changed ...
    assert_same_numbers(hooked[..., :8], plain[..., :8], rtol=TOLERANCE, what="forward half")  # ... only it


# ------------------------------------------------------------------------------------------------- older folders


def test_a_folder_with_the_older_lstm_parameter_names_is_upgraded_in_place_and_then_loads_with_identical_outputs(
    tmp_path, capsys
):
    """The shipped files read today's names only: the package's loader refuses the older folder naming `elmo
    upgrade`, which renames the tensors (their bytes unchanged); transformers then loads it with nothing missing."""
    from transformers import AutoModel

    from modeling_elmo import load_elmo_model
    from modeling_elmo.cli import main

    tester, model = clipping_model()
    write_legacy_folder(model, tmp_path / "old")
    older = load_file(str(tmp_path / "old" / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"earlier version of this package: run `elmo upgrade {tmp_path / 'old'}`"):
        load_elmo_model(tmp_path / "old")
    assert main(["upgrade", str(tmp_path / "old")]) == 0
    assert (
        capsys.readouterr().out == "elmo upgrade: changed model.safetensors: the older LSTM parameter names renamed\n"
    )
    upgraded = load_file(str(tmp_path / "old" / "model.safetensors"))
    assert upgraded.keys() == model.state_dict().keys()
    assert all(torch.equal(upgraded[renamed_legacy_key(key)], tensor) for key, tensor in older.items())
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        expected = model(**enc).last_hidden_state
        loaded, info = AutoModel.from_pretrained(tmp_path / "old", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        assert_same_numbers(loaded(**enc).last_hidden_state, expected, what="upgraded")
        assert_same_numbers(load_elmo_model(tmp_path / "old")(**enc).last_hidden_state, expected, what="tools")
    lm = ElmoForBidirectionalLM.from_pretrained(tmp_path / "old")  # the head classes too (under the prefix)
    assert torch.equal(
        lm.elmo.encoder.forward_layers[1].projection.weight, model.encoder.forward_layers[1].projection.weight
    )
    assert main(["upgrade", str(tmp_path / "old")]) == 0  # a second run changes nothing
    assert "already in today's format; nothing changed" in capsys.readouterr().out
    assert load_file(str(tmp_path / "old" / "model.safetensors")).keys() == upgraded.keys()


def test_a_checkpoint_holding_an_older_and_the_current_lstm_name_loads_no_mix_and_the_tools_refuse_it(tmp_path):
    """A checkpoint with both ``...weight_hr`` and ``...projection.weight`` (different values): transformers loads
    today's tensor of each pair (no mix of the two) and names the older one among the unexpected keys; the package's
    loader refuses it naming the tensor, and `elmo upgrade` refuses it naming both, in one line, changing nothing."""
    from transformers import AutoModel, AutoModelForSequenceClassification
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from modeling_elmo import ElmoForSequenceClassification, load_elmo_model
    from modeling_elmo.conversion.upgrade import upgrade_folder

    tester, model = clipping_model()
    save_model_folder(model, None, tmp_path / "mixed")
    path = tmp_path / "mixed" / "model.safetensors"
    weights = load_file(str(path))
    current, older = "encoder.forward_layers.1.projection.weight", "encoder.forward_layers.1.weight_hr"
    weights[older] = weights[current] + 1.0
    save_file(weights, str(path), metadata={"format": "pt"})
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        expected = model(**enc).last_hidden_state
    loaders = [
        AutoModel.from_pretrained,
        ElmoModel.from_pretrained,
        get_class_from_dynamic_module("modeling_elmo.ElmoModel", str(tmp_path / "mixed")).from_pretrained,
    ]
    for load in loaders:
        loaded, info = load(tmp_path / "mixed", output_loading_info=True)
        assert older in info["unexpected_keys"] and not info["missing_keys"], info
        with torch.no_grad():
            assert_same_numbers(loaded(**enc).last_hidden_state, expected, what="today's tensors")  # not a mix
    for load in (ElmoForSequenceClassification.from_pretrained, AutoModelForSequenceClassification.from_pretrained):
        head, info = load(tmp_path / "mixed", output_loading_info=True)
        assert f"elmo.{older}" in info["unexpected_keys"] or older in info["unexpected_keys"], info
        assert torch.equal(head.elmo.encoder.forward_layers[1].projection.weight, weights[current])
    before = path.read_bytes()
    layer = r"'encoder\.forward_layers\.1\."
    both = rf"holds both {layer}weight_hr' \(an older LSTM parameter name\) and {layer}projection\.weight'"
    for refuse in (load_elmo_model, upgrade_folder):  # the tools' loader (elmo embed, elmo evaluate), elmo upgrade
        with pytest.raises(ValueError, match=both) as raised:
            refuse(tmp_path / "mixed")
        assert "\n" not in str(raised.value) and path.read_bytes() == before


# ------------------------------------------------------------------------------------------ gradient checkpointing
@pytest.mark.parametrize("implementation", ["fused", "loop"])
@pytest.mark.parametrize("form", ["shipped", "package"])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(implementation, form):
    tester, model = clipping_model(ElmoForBidirectionalLM, lstm_implementation=implementation)
    model.config.use_packed_kernels = form == "package"
    enc = tester.encode(SENTENCES)
    labels = torch.randint(4, 40, enc["attention_mask"].shape).masked_fill(enc["attention_mask"] == 0, -100)
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable()
            assert model.elmo.char_encoder.gradient_checkpointing
            assert all(layer.gradient_checkpointing for layer in model.elmo.encoder.forward_layers)
        model.train()
        model.zero_grad()
        torch.manual_seed(4)  # the same dropout and negative sample
        out = model(**enc, labels=labels)
        out.loss.backward()
        results.append(
            (out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        )
    (loss, grads), (loss_ckpt, grads_ckpt) = results
    assert_same_numbers(loss_ckpt, loss, rtol=TOLERANCE, what="loss")
    assert grads.keys() == grads_ckpt.keys() and any(".input_transform." in n for n in grads)
    for name, grad in grads.items():
        assert_same_numbers(grads_ckpt[name], grad, rtol=TOLERANCE, what=name)


def test_gradient_checkpointing_recomputes_the_lstm_and_the_character_convolutions_in_the_backward_pass():
    tester, model = clipping_model(ElmoModel, lstm_implementation="fused")
    model.gradient_checkpointing_enable()
    model.train()
    calls = []
    model.char_encoder.convolutions[0].register_forward_hook(lambda *args: calls.append("convolution"))
    model.encoder.forward_layers[0].projection.register_forward_hook(lambda *args: calls.append("lstm"))
    out = model(**tester.encode(SENTENCES)).last_hidden_state
    forward_calls = {name: calls.count(name) for name in ("convolution", "lstm")}
    out.sum().backward()
    assert calls.count("convolution") == 2 * forward_calls["convolution"] > 0  # run again in the backward pass
    assert calls.count("lstm") == 2 * forward_calls["lstm"] > 0


# ----------------------------------------------------------------------------------------- compile and lstm_state
@pytest.mark.slow
@pytest.mark.parametrize("form", ["shipped", "package"])
def test_fullgraph_compiled_model_matches_eager(form):
    tester, model = clipping_model()
    model.config.use_packed_kernels = form == "package"  # never traced: the compiled model runs the shipped form
    enc = tester.encode(SENTENCES)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        expected = model(**enc, return_lstm_state=True)
        actual = compiled(**enc, return_lstm_state=True)
    assert_same_numbers(actual.last_hidden_state, expected.last_hidden_state, rtol=TOLERANCE, what="outputs")
    assert_same_numbers(actual.lstm_state.cell, expected.lstm_state.cell, rtol=TOLERANCE, what="cell state")


def test_an_lstm_state_of_another_model_or_type_is_one_clear_error():
    tester, model = clipping_model()
    enc = tester.encode(SENTENCES)
    with torch.no_grad():
        state = model(**enc, return_lstm_state=True).lstm_state
        model(**enc, lstm_state=state)  # its own state is fine
        _, wider = clipping_model(projection_dim=6)
        other = wider(**enc, return_lstm_state=True).lstm_state
        with pytest.raises(
            ValueError, match=r"lstm_state\.hidden must have shape \(2, 2, rows, 8\) .*got \(2, 2, 4, 6\)"
        ):
            model(**enc, lstm_state=other)
        _, deeper = clipping_model(num_hidden_layers=3)
        with pytest.raises(ValueError, match=r"shape \(2, 2, rows, 8\) .*got \(2, 3, 4, 8\)"):
            model(**enc, lstm_state=deeper(**enc, return_lstm_state=True).lstm_state)
        with pytest.raises(
            ValueError, match=r"lstm_state\.cell must have shape \(2, 2, rows, 16\).*got \(2, 2, 3, 16\)"
        ):
            model(**enc, lstm_state=ElmoLstmState(state.hidden, state.cell[:, :, :3]))
        with pytest.raises(ValueError, match="lstm_state must be an ElmoLstmState .*got tuple"):
            model(**enc, lstm_state=(state.hidden, state.cell))


def test_renaming_the_older_names_gives_todays_names_to_the_lstm_parameters_only():
    _, model = clipping_model(ElmoForBidirectionalLM)
    today = model.state_dict()
    older = {}
    for key, tensor in today.items():
        for new, old in LEGACY_NAMES.items():
            if "_layers." in key and key.endswith("." + new):
                key = key[: -len(new)] + old
        older[key] = tensor
    assert older.keys() != today.keys() and "elmo.char_encoder.projection.bias" in older
    assert [renamed_legacy_key(key) for key in older] == list(today)
    assert [renamed_legacy_key(key) for key in today] == list(today)  # today's names stay
    assert legacy_keys(older) == sorted(set(older) - set(today)) and legacy_keys(today) == []


def test_building_an_lstm_layer_draws_nothing_from_the_random_stream():
    """`_init_weights` initialises the transforms: a seed gives the same model as when they were bare parameters."""
    torch.manual_seed(0)
    layer = modeling.ElmoLstmLayer(4, 8, 4, None, None)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), after)
    assert (
        layer.input_transform.bias is not None
        and layer.recurrent_transform.bias is None
        and layer.projection.bias is None
    )
