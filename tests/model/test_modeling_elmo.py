"""ElmoModel and its heads: shapes, directionality, statelessness, numerics against numpy, heads, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import assert_same_numbers
from support.model import SENTENCES, ElmoModelTester

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoScalarMix,
    ElmoTokenizer,
    encode_words,
)
from modeling_elmo import modeling_elmo as modeling


@pytest.fixture
def tester():
    return ElmoModelTester()


def run(model, sentences, tokenizer=None, grad=False, **kwargs):
    """Forward without autograd (the CPU inference path, MKL-packed weights where available), or with it."""
    tokenizer = tokenizer or ElmoTokenizer()
    enc = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.set_grad_enabled(grad):
        return model(**enc, output_hidden_states=True, **kwargs)


def test_model_output_shapes(tester):
    out = run(tester.model(), SENTENCES)
    assert tuple(out.last_hidden_state.shape) == (4, 6, 16)
    assert all(tuple(h.shape) == (4, 6, 16) for h in out.hidden_states)
    assert out.attention_mask.tolist()[1] == [1, 1, 1, 0, 0, 0]


def test_num_representation_layers_equals_num_hidden_layers_plus_one():
    for layers in (1, 2, 3):
        tester = ElmoModelTester(num_hidden_layers=layers)
        assert len(run(tester.model(), SENTENCES).hidden_states) == layers + 1


def test_layer0_is_the_token_embedding_twice_and_context_free(tester):
    out = run(tester.model(), [["bank", "river", "bank"], ["the", "bank"]])
    layer0 = out.hidden_states[0]
    torch.testing.assert_close(layer0[..., :8], layer0[..., 8:])
    torch.testing.assert_close(layer0[0, 0], layer0[0, 2])
    torch.testing.assert_close(layer0[0, 0], layer0[1, 1])
    assert not torch.allclose(out.hidden_states[2][0, 0], out.hidden_states[2][0, 2])


def test_forward_lm_does_not_see_future_tokens_and_backward_not_past_tokens(tester):
    model = tester.model()
    base = [["one", "two", "three", "four", "five"]]
    changed = [["one", "two", "THREE", "four", "five"]]
    a, b = run(model, base), run(model, changed)
    for layer in (1, 2):
        fa, fb = a.hidden_states[layer][0, :, :8], b.hidden_states[layer][0, :, :8]
        ba, bb = a.hidden_states[layer][0, :, 8:], b.hidden_states[layer][0, :, 8:]
        assert_same_numbers(fb[:2], fa[:2], what="forward half before the change must not move")
        assert_same_numbers(bb[3:], ba[3:], what="backward half after the change must not move")
        assert not torch.allclose(fa[2:], fb[2:]) and not torch.allclose(ba[:3], bb[:3])


def test_padding_and_batch_composition_change_no_valid_position(tester):
    model = tester.model()
    together = run(model, SENTENCES)
    for i, sentence in enumerate(SENTENCES):
        alone = run(model, [sentence])
        other = run(model, [["x"] * 9, sentence, ["y"]])
        n = len(sentence)
        for layer in range(3):
            assert (together.hidden_states[layer][i, :n] - alone.hidden_states[layer][0, :n]).abs().max() < 1e-6
            assert (other.hidden_states[layer][1, :n] - alone.hidden_states[layer][0, :n]).abs().max() < 1e-6


def test_left_padding_gives_the_same_vectors_as_right_padding(tester):
    model = tester.model()
    right = tester.encode()
    left = tester.encode(padding_side="left")
    with torch.no_grad():
        r = model(**right).last_hidden_state
        l = model(**left).last_hidden_state
    for i, sentence in enumerate(SENTENCES):
        n = len(sentence)
        torch.testing.assert_close(l[i, l.shape[1] - n :], r[i, :n], atol=1e-6, rtol=0)
        assert (l[i, : l.shape[1] - n] == 0).all()


def test_padded_positions_and_empty_sentences_are_zero_not_nan(tester):
    out = run(tester.model(), [["a", "b"], []])
    for layer in out.hidden_states:
        assert torch.isfinite(layer).all()
        assert (layer[1] == 0).all()
    enc = tester.encode([["a", "b", "c"], ["d"]])
    enc["attention_mask"][0, 2] = 0  # the mask wins over present characters
    with torch.no_grad():
        masked = tester.model()(**enc).last_hidden_state
    assert (masked[0, 2] == 0).all()


def test_stateless_by_default_and_a_passed_lstm_state_continues_where_the_last_call_stopped(tester):
    model = tester.model()
    first, second = run(model, SENTENCES), run(model, SENTENCES)
    assert torch.equal(first.last_hidden_state, second.last_hidden_state) and first.lstm_state is None
    a = run(model, SENTENCES, return_lstm_state=True)
    torch.testing.assert_close(a.last_hidden_state, first.last_hidden_state)  # the first call starts from zeros
    assert a.lstm_state.hidden.shape == (2, 2, len(SENTENCES), 8) and a.lstm_state.cell.shape == (
        2,
        2,
        len(SENTENCES),
        16,
    )
    b = run(model, SENTENCES, lstm_state=a.lstm_state)
    assert (a.last_hidden_state - b.last_hidden_state).abs().max() > 1e-4  # the second starts from a's final states
    # An independent check of what is carried: the forward LSTMs reading a stream in two calls equal one call.
    words = [["w1", "w2", "w3", "w4", "w5", "w6"]]
    whole = run(model, words, add_sentence_boundaries=False)
    head = run(model, [words[0][:2]], add_sentence_boundaries=False, return_lstm_state=True)
    tail = run(model, [words[0][2:]], add_sentence_boundaries=False, lstm_state=head.lstm_state)
    for layer in (1, 2):
        assert_same_numbers(
            tail.hidden_states[layer][0, :, :8],
            whole.hidden_states[layer][0, 2:, :8],
            what=f"forward half of layer {layer}",
        )


def test_lstm_state_grows_for_larger_batches_and_keeps_rows_beyond_a_smaller_one(tester):
    model = tester.model()
    two = run(model, SENTENCES[:2], return_lstm_state=True).lstm_state
    four = run(model, SENTENCES, lstm_state=two).lstm_state
    assert four.hidden.shape[2] == 4
    one = run(model, SENTENCES[:1], lstm_state=four).lstm_state
    assert one.hidden.shape[2] == 4
    assert torch.equal(one.hidden[:, :, 1:], four.hidden[:, :, 1:]) and torch.equal(
        one.cell[:, :, 1:], four.cell[:, :, 1:]
    )
    assert not torch.equal(one.hidden[:, :, :1], four.hidden[:, :, :1])


def test_torch_lstm_path_matches_the_loop_where_nothing_is_clipped():
    tester = ElmoModelTester(cell_clip=None, proj_clip=None)
    loop = tester.model(lstm_implementation="loop")
    fast = tester.model(lstm_implementation="torch")
    assert fast.config.uses_torch_lstm and not loop.config.uses_torch_lstm
    a, b = run(loop, SENTENCES), run(fast, SENTENCES)
    for x, y in zip(a.hidden_states, b.hidden_states, strict=False):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-5)
    # auto picks torch exactly when no clip is configured
    assert ElmoConfig(cell_clip=None, proj_clip=None).uses_torch_lstm and not ElmoConfig().uses_torch_lstm


def test_loop_gradients_equal_the_torch_lstm_gradients_on_padded_batches():
    # torch.lstm has its own backward: an independent check of the loop's autograd graph (padding, stacking)
    tester = ElmoModelTester(cell_clip=None, proj_clip=None)
    loop = tester.model(lstm_implementation="loop", seed=7).train()
    fast = tester.model(lstm_implementation="torch", seed=7).train()
    enc = tester.encode(SENTENCES)  # lengths 6, 3, 2, 5: padded rows in every batch position
    weights = torch.randn(len(SENTENCES), 3, enc["input_ids"].shape[1], 16, generator=torch.Generator().manual_seed(0))
    for model in (loop, fast):
        out = model(**enc, output_hidden_states=True)
        layers = torch.stack(out.hidden_states, dim=1)  # (B, 3, T, 2P)
        (layers * weights * enc["attention_mask"][:, None, :, None]).sum().backward()
    grads = dict(fast.named_parameters())
    checked = 0
    for name, parameter in loop.named_parameters():
        if parameter.grad is None:
            continue
        torch.testing.assert_close(parameter.grad, grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)
        checked += name.startswith("encoder.")
    assert checked == 2 * 2 * 4  # every LSTM parameter of both directions and layers got a gradient


def test_projection_clip_bounds_the_first_layer():
    tester = ElmoModelTester(proj_clip=0.01, cell_clip=0.05)
    out = run(tester.model(), SENTENCES)
    assert out.hidden_states[1].abs().max() <= 0.01 + 1e-7  # layer 1 output is the clipped projection (no residual)


# ------------------------------------------------------------------ independent numpy computations
def numpy_char_encoder(model: ElmoModel, words: list[str]) -> np.ndarray:
    """Character CNN, highway and projection written directly from the reference (section 4.1)."""
    sd = {k: v.detach().numpy().astype(np.float64) for k, v in model.state_dict().items()}
    ids = encode_words(words)
    x = sd["char_encoder.char_embeddings.weight"][ids]  # (N, 50, d)
    pooled = []
    for i, (width, count) in enumerate(model.config.char_cnn_filters):
        w = sd[f"char_encoder.convolutions.{i}.weight"]  # (n, d, w)
        b = sd[f"char_encoder.convolutions.{i}.bias"]
        scores = np.stack([np.einsum("npd,kdp->nk", x[:, t : t + width], w) for t in range(50 - width + 1)], 1) + b
        pooled.append(np.maximum(scores.max(axis=1), 0))
    h = np.concatenate(pooled, axis=1)
    for k in range(model.config.num_highway_layers):
        p = f"char_encoder.highways.{k}."
        gate = 1 / (1 + np.exp(-(h @ sd[p + "gate.weight"].T + sd[p + "gate.bias"])))
        h = gate * np.maximum(h @ sd[p + "transform.weight"].T + sd[p + "transform.bias"], 0) + (1 - gate) * h
    return h @ sd["char_encoder.projection.weight"].T + sd["char_encoder.projection.bias"]


def numpy_lstm_direction(sd: dict, prefix: str, x: np.ndarray, cell_clip, proj_clip) -> np.ndarray:
    """One direction of one layer, one step at a time (PyTorch gate order), for one unpadded sentence."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    w_ih, w_hh, bias, w_hr = (
        sd[prefix + n]
        for n in ("input_transform.weight", "recurrent_transform.weight", "input_transform.bias", "projection.weight")
    )
    H = w_hh.shape[0] // 4
    h, c, out = np.zeros(w_hr.shape[0]), np.zeros(H), []
    for xt in x:
        z = w_ih @ xt + w_hh @ h + bias
        i, f, g, o = z[:H], z[H : 2 * H], z[2 * H : 3 * H], z[3 * H :]
        c = np.clip(sig(f) * c + sig(i) * np.tanh(g), -cell_clip, cell_clip)
        h = np.clip(w_hr @ (sig(o) * np.tanh(c)), -proj_clip, proj_clip)
        out.append(h)
    return np.array(out)


def test_character_encoder_matches_numpy(tester):
    model = tester.model()
    words = ["The", "bank", "é", "<S>", "x" * 60]
    with torch.no_grad():
        ours = model.char_encoder(torch.as_tensor(encode_words(words))).numpy()
    np.testing.assert_allclose(ours, numpy_char_encoder(model, words), atol=1e-5)


@pytest.mark.parametrize("implementation", ["loop", "fused"])
@pytest.mark.parametrize("grad", [False, True], ids=["inference-path", "autograd-path"])
def test_every_layer_matches_a_numpy_step_by_step_computation(grad, implementation):
    tester = ElmoModelTester(cell_clip=0.5, proj_clip=0.4)  # small clips so that clipping really happens
    model = tester.model(seed=3, lstm_implementation=implementation)
    with torch.no_grad():  # larger weights than the initialisation so that both clips trigger
        for name, parameter in model.encoder.named_parameters():
            parameter.mul_(6.0)
    sd = {k: v.detach().numpy().astype(np.float64) for k, v in model.state_dict().items()}
    out = run(model, SENTENCES, grad=grad)
    clipped = 0
    for i, sentence in enumerate(SENTENCES):
        e = numpy_char_encoder(model, ["<S>"] + sentence + ["</S>"])  # (n + 2, P)
        layers = [np.concatenate([e, e], 1)]
        fwd_in, bwd_in = e, e[::-1]
        for l in range(2):
            f = numpy_lstm_direction(sd, f"encoder.forward_layers.{l}.", fwd_in, 0.5, 0.4)
            b = numpy_lstm_direction(sd, f"encoder.backward_layers.{l}.", bwd_in, 0.5, 0.4)
            clipped += int((np.abs(f) >= 0.4 - 1e-9).sum()) + int((np.abs(b) >= 0.4 - 1e-9).sum())
            if l > 0:
                f, b = f + fwd_in, b + bwd_in
            layers.append(np.concatenate([f, b[::-1]], 1))
            fwd_in, bwd_in = f, b
        n = len(sentence)
        for layer in range(3):
            np.testing.assert_allclose(
                out.hidden_states[layer][i, :n].detach().numpy(), layers[layer][1:-1], atol=5e-5
            )  # fp32 vs fp64 with 6x weights
    assert clipped > 0, "the clip must trigger in this test"


@pytest.mark.parametrize("implementation", ["loop", "fused"])
def test_inference_path_follows_in_place_weight_updates_and_batch_sizes(tester, implementation):
    model = tester.model(seed=4, lstm_implementation=implementation)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for sentences in (SENTENCES, SENTENCES[:3], SENTENCES[:1], SENTENCES):  # several batch sizes, then back
        before = run(model, sentences).last_hidden_state
        torch.testing.assert_close(
            before, run(model, sentences, grad=True).last_hidden_state.detach(), atol=1e-6, rtol=0
        )
    loss = run(model, SENTENCES, grad=True).last_hidden_state.square().sum()
    loss.backward()
    optimizer.step()  # in place: any copy of the old weights kept for inference must not be used again
    after = run(model, SENTENCES).last_hidden_state
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, run(model, SENTENCES, grad=True).last_hidden_state.detach(), atol=1e-6, rtol=0)
    model.load_state_dict(tester.model(seed=5).state_dict())  # load_state_dict copies in place too
    torch.testing.assert_close(
        run(model, SENTENCES).last_hidden_state,
        run(tester.model(seed=5), SENTENCES, grad=True).last_hidden_state.detach(),
        atol=1e-6,
        rtol=0,
    )


def test_model_built_inside_inference_mode_runs_and_matches(tester):
    with torch.inference_mode():  # parameters are inference tensors: no version counter to key a weight cache on
        model = tester.model(seed=6)
        assert model.encoder.forward_layers[0].recurrent_transform.weight.is_inference()
        out = model(**tester.encode(SENTENCES)).last_hidden_state
    torch.testing.assert_close(out, run(tester.model(seed=6), SENTENCES).last_hidden_state, atol=1e-6, rtol=0)


def test_scalar_mix_is_a_softmax_weighted_sum_times_gamma():
    mix = ElmoScalarMix(3, num_output_representations=2)
    with torch.no_grad():
        mix.scalar_parameters.copy_(torch.tensor([[0.1, 0.2, 0.3], [1.0, -1.0, 0.0]]))
        mix.gamma.copy_(torch.tensor([2.0, 0.5]))
    layers = torch.randn(2, 3, 4, 5)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).bool()
    outs = mix(layers, mask)
    for k in range(2):
        w = np.exp(mix.scalar_parameters[k].detach().numpy())
        w /= w.sum()
        expected = mix.gamma[k].item() * np.einsum("l,bltd->btd", w, layers.numpy()) * mask.numpy()[..., None]
        np.testing.assert_allclose(outs[k].detach().numpy(), expected, atol=1e-6)


def test_scalar_mix_layer_norm_uses_one_masked_mean_and_variance_per_layer():
    mix = ElmoScalarMix(2, do_layer_norm=True)
    layers = torch.randn(2, 2, 3, 4) * 5 + 3
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()
    out = mix(layers, mask)[0]
    arr, m = layers.numpy(), mask.numpy()
    expected = 0
    for j in range(2):
        values = arr[:, j][m]  # (valid tokens, 4)
        expected = expected + 0.5 * (arr[:, j] - values.mean()) / np.sqrt(values.var() + 1e-12)
    np.testing.assert_allclose(out.detach().numpy(), expected * m[..., None], atol=1e-5)
    with pytest.raises(ValueError, match="fixed_weights"):
        ElmoScalarMix(3, fixed_weights=[1.0, 2.0])


def test_save_load_roundtrip_keeps_every_weight_and_the_outputs(tester, tmp_path):
    model = tester.model(ElmoForSequenceClassification)
    model.save_pretrained(tmp_path)
    loaded = ElmoForSequenceClassification.from_pretrained(tmp_path).eval()
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name  # stored bits read back
    enc = tester.encode()
    with torch.no_grad():
        assert_same_numbers(loaded(**enc).logits, model(**enc).logits, what="logits after a reload")


def test_initialisation_gives_healthy_activations():
    config = ElmoConfig.from_json_file("configuration/elmo-27m.json")
    config.vocab_size = 4
    torch.manual_seed(0)
    out = run(ElmoModel(config).eval(), SENTENCES)
    stds = [h[out.attention_mask.bool()].std().item() for h in out.hidden_states]
    # the bilm-tf initialisation gives about 0.19 (tokens), 0.048 and 0.050 (LSTM layers) here; transformers' default
    # N(0, 0.02) everywhere gives 0.0017 and 0.00016: vanishing
    assert all(0.02 < s < 10 for s in stds), stds


# ------------------------------------------------------------------ language-model head
def test_lm_loss_is_the_mean_of_exact_directional_cross_entropies(tester):
    model = tester.model(ElmoForBidirectionalLM)
    labels = torch.tensor([[5, 6, 7], [8, -100, -100]])
    enc = tester.encode([["a", "b", "c"], ["d"]])
    out = model(**enc, labels=labels, keep_sentence_boundaries=True)
    top = out.last_hidden_state.detach()  # (2, 5, 16) with boundaries
    W, b = model.softmax.weight.detach(), model.softmax.bias.detach()
    logp = lambda h: torch.log_softmax(h @ W.T + b, -1)  # noqa: E731
    # forward: <S> a b c -> a b c </S>;  backward: a b c </S> -> <S> a b c
    fwd = (
        -(
            logp(top[0, 0:4, :8])[torch.arange(4), torch.tensor([5, 6, 7, 2])].sum()
            + logp(top[1, 0:2, :8])[torch.arange(2), torch.tensor([8, 2])].sum()
        )
        / 6
    )
    bwd = (
        -(
            logp(top[0, 1:5, 8:])[torch.arange(4), torch.tensor([1, 5, 6, 7])].sum()
            + logp(top[1, 1:3, 8:])[torch.arange(2), torch.tensor([1, 8])].sum()
        )
        / 6
    )
    torch.testing.assert_close(out.forward_loss, fwd)
    torch.testing.assert_close(out.backward_loss, bwd)
    torch.testing.assert_close(out.loss, (fwd + bwd) / 2)
    assert out.num_forward_targets.item() == out.num_backward_targets.item() == 6
    out.loss.backward()
    assert model.softmax.weight.grad is not None and model.elmo.char_encoder.projection.weight.grad.abs().sum() > 0


def test_window_mode_predicts_neighbours_inside_the_window(tester):
    model = tester.model(ElmoForBidirectionalLM)
    enc = tester.encode([["<S>", "a", "b", "</S>", "<S>"]])
    labels = torch.tensor([[1, 5, 6, 2, 1]])
    out = model(**enc, labels=labels, add_sentence_boundaries=False)
    assert out.last_hidden_state.shape[1] == 5 and out.num_forward_targets.item() == 4


def test_chunked_full_softmax_equals_unchunked(tester):
    model = tester.model(ElmoForBidirectionalLM)
    h, t = torch.randn(7, 8), torch.randint(0, 40, (7,))
    whole = model.full_softmax_nll(h, t)
    model.config.lm_softmax_chunk_size = 3
    torch.testing.assert_close(model.full_softmax_nll(h, t), whole)
    expected = -torch.log_softmax(model.softmax(h), -1)[torch.arange(7), t]
    torch.testing.assert_close(whole, expected)


def test_lm_head_refuses_a_model_without_vocabulary():
    with pytest.raises(ValueError, match="vocab_size"):
        ElmoForBidirectionalLM(
            ElmoConfig(projection_dim=8, cell_size=16, char_cnn_filters=[[1, 4]], num_highway_layers=0)
        )


# ------------------------------------------------------------------ task heads
def test_frozen_elmo_gets_no_gradient_and_no_dropout_before_and_after_a_reload(tester, tmp_path):
    tester = ElmoModelTester(hidden_dropout_prob=0.5, classifier_dropout=0.1, num_labels=3)
    model = tester.model(ElmoForSequenceClassification)
    model.save_pretrained(tmp_path)
    for model in (model, ElmoForSequenceClassification.from_pretrained(tmp_path)):
        model.train()
        before = {k: v.clone() for k, v in model.elmo.state_dict().items()}
        with torch.no_grad():
            features = model.elmo.eval()(**tester.encode()).last_hidden_state
        model.train()
        out = model(**tester.encode(), labels=torch.tensor([0, 1, 2, 1]))
        out.loss.backward()
        assert all(p.grad is None and not p.requires_grad for p in model.elmo.parameters())
        assert model.classifier.weight.grad is not None and model.scalar_mix.scalar_parameters.grad is not None
        torch.optim.AdamW(model.parameters(), lr=1.0, weight_decay=0.1).step()  # as Trainer builds it: all parameters
        assert all(torch.equal(before[k], v) for k, v in model.elmo.state_dict().items())
        top = model(**tester.encode(), output_hidden_states=True).hidden_states[-1]
        torch.testing.assert_close(top, features)  # in training mode too: no dropout inside the biLM
    model.unfreeze_elmo()
    model(**tester.encode(), labels=torch.tensor([0, 1, 2, 1])).loss.backward()
    assert model.elmo.char_encoder.projection.weight.grad is not None


def test_freezing_is_requires_grad_so_trainable_counts_are_right_and_follow_the_config(tmp_path):
    tester = ElmoModelTester(num_labels=3)
    for cls in (ElmoForSequenceClassification, ElmoForTokenClassification):
        model = tester.model(cls)
        head = sum(
            p.numel() for p in (*model.classifier.parameters(), *model.scalar_mix.parameters()) if p.requires_grad
        )
        assert (
            head == model.classifier.weight.numel() + model.classifier.bias.numel() + model.config.num_hidden_layers + 2
        )
        assert not any(p.requires_grad for p in model.elmo.parameters())
        assert model.num_parameters(only_trainable=True) == head < model.num_parameters()
        model.save_pretrained(tmp_path / cls.__name__)
        assert cls.from_pretrained(tmp_path / cls.__name__).num_parameters(only_trainable=True) == head
        unfrozen = cls.from_pretrained(tmp_path / cls.__name__, freeze_elmo=False)
        assert unfrozen.num_parameters(only_trainable=True) == unfrozen.num_parameters()
        model.unfreeze_elmo()
        assert model.num_parameters(only_trainable=True) == model.num_parameters() and model.config.freeze_elmo
        model.freeze_elmo()
        assert model.num_parameters(only_trainable=True) == head


def test_from_pretrained_gives_a_frozen_bilm_through_every_loader_and_unfreezing_lasts(tmp_path):
    """No `from_pretrained` override: the heads freeze again once the loaded weights are in place (`tie_weights`,
    which transformers calls last), through the package's classes, the Auto classes and the folder's own code."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from modeling_elmo import save_model_folder

    tester = ElmoModelTester(num_labels=3)
    for cls, auto in (
        (ElmoForSequenceClassification, AutoModelForSequenceClassification),
        (ElmoForTokenClassification, AutoModelForTokenClassification),
    ):
        folder = str(tmp_path / cls.__name__)
        save_model_folder(tester.model(cls), None, folder)
        remote = get_class_from_dynamic_module(f"modeling_elmo.{cls.__name__}", folder)
        for load in (cls.from_pretrained, auto.from_pretrained, remote.from_pretrained):
            model = load(folder)
            assert not any(p.requires_grad for p in model.elmo.parameters()), load
            assert all(p.requires_grad for p in (*model.classifier.parameters(), *model.scalar_mix.parameters()))
            model.unfreeze_elmo()
            model.tie_weights()  # as resizing calls it: an unfrozen biLM stays unfrozen
            assert all(p.requires_grad for p in model.elmo.parameters())
            assert all(p.requires_grad for p in load(folder, freeze_elmo=False).elmo.parameters())


def test_cached_features_give_the_same_logits_as_character_input():
    tester = ElmoModelTester(num_labels=4)
    for cls in (ElmoForSequenceClassification, ElmoForTokenClassification):
        model = tester.model(cls)
        enc = tester.encode()
        with torch.no_grad():
            direct = model(**enc).logits
            layers = model.elmo(**enc, output_hidden_states=True).hidden_states
            cached = model(elmo_hidden_states=torch.stack(layers, 1), attention_mask=enc["attention_mask"]).logits
        torch.testing.assert_close(direct, cached)


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max", "first", "last"])
def test_pooling_ignores_padding(pooling):
    tester = ElmoModelTester(num_labels=2, classifier_pooling=pooling)
    model = tester.model(ElmoForSequenceClassification)
    with torch.no_grad():
        batched = model(**tester.encode()).logits
        for i, sentence in enumerate(SENTENCES):
            torch.testing.assert_close(model(**tester.encode([sentence])).logits[0], batched[i], atol=1e-6, rtol=0)


def test_problem_types_follow_transformers_conventions():
    enc = ElmoModelTester().encode()
    regression = ElmoModelTester(num_labels=1).model(ElmoForSequenceClassification)
    assert regression(**enc, labels=torch.randn(4)).loss.ndim == 0 and regression.config.problem_type == "regression"
    multi = ElmoModelTester(num_labels=3).model(ElmoForSequenceClassification)
    assert (
        multi(**enc, labels=torch.ones(4, 3)).loss.ndim == 0
        and multi.config.problem_type == "multi_label_classification"
    )
    single = ElmoModelTester(num_labels=3).model(ElmoForSequenceClassification)
    with pytest.raises(ValueError, match="outside"):
        single(**enc, labels=torch.tensor([0, 1, 5, 0]))


def test_token_classification_ignores_padding_labels():
    tester = ElmoModelTester(num_labels=5)
    model = tester.model(ElmoForTokenClassification)
    enc = tester.encode([["a", "b"], ["c"]])
    loss_a = model(**enc, labels=torch.tensor([[1, 2], [3, 4]])).loss
    loss_b = model(**enc, labels=torch.tensor([[1, 2], [3, 0]])).loss
    torch.testing.assert_close(loss_a, loss_b)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda e: {"input_ids": e["input_ids"][0]}, "shape"),
        (lambda e: {"input_ids": e["input_ids"].float()}, "dtype torch.float32"),
        (lambda e: {"input_ids": e["input_ids"].to(torch.uint8)}, "dtype torch.uint8"),
        (lambda e: {"input_ids": e["input_ids"].to(torch.int8)}, "dtype torch.int8"),
        (lambda e: {"input_ids": e["input_ids"][..., :10]}, "shape"),
        (lambda e: {"input_ids": e["input_ids"].clone().fill_(300)}, r"outside \[0, 261\]"),
        (lambda e: {"input_ids": e["input_ids"] * -1}, r"outside \[0, 261\]"),
        (lambda e: {"input_ids": e["input_ids"], "attention_mask": e["attention_mask"][:, :2]}, "attention_mask"),
        (lambda e: {"input_ids": e["input_ids"], "attention_mask": torch.ones_like(e["attention_mask"])}, "all 0"),
        (lambda e: {"input_ids": e["input_ids"][:0]}, "empty batch"),
    ],
)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_bad_input_is_named_in_eval_and_in_training(tester, make, message, training):
    model = tester.model().train(training)
    with pytest.raises(ValueError, match=message):
        model(**make(tester.encode()))


def test_lists_and_arrays_are_accepted_as_inputs_and_mask(tester):
    enc = tester.encode()
    model = tester.model()
    with torch.no_grad():
        expected = model(**enc).last_hidden_state
        got = model(input_ids=enc["input_ids"].tolist(), attention_mask=enc["attention_mask"].numpy()).last_hidden_state
    assert torch.equal(got, expected)


@pytest.mark.parametrize("label", [99, 40, -7, -1])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_lm_labels_outside_the_vocabulary_are_named_and_negative_ones_do_not_wrap(tester, label, training):
    model = tester.model(ElmoForBidirectionalLM).train(training)
    with pytest.raises(ValueError, match=r"outside \[0, 40\)"):
        model(**tester.encode([["a", "b"]]), labels=torch.tensor([[5, label]]))


def test_lm_ignores_exactly_the_labels_minus_100(tester):
    model = tester.model(ElmoForBidirectionalLM)
    out = model(**tester.encode([["a", "b"]]), labels=torch.tensor([[5, -100]]))
    assert out.num_forward_targets.item() == 2 and out.num_backward_targets.item() == 2  # a + </S>; <S> + a


def test_float_labels_are_refused_where_classes_are_expected(tester):
    tagger = ElmoModelTester(num_labels=5).model(ElmoForTokenClassification)
    enc = tester.encode([["a", "b"]])
    with pytest.raises(ValueError, match="integer class ids, got dtype torch.float32"):
        tagger(**enc, labels=torch.tensor([[3.7, 1.0]]))
    classifier = ElmoModelTester(num_labels=5, problem_type="single_label_classification").model(
        ElmoForSequenceClassification
    )
    with pytest.raises(ValueError, match="integer class ids"):
        classifier(**enc, labels=torch.tensor([3.7]))
    with pytest.raises(ValueError, match=r"outside \[0, 5\)"):
        classifier(**enc, labels=torch.tensor([5]))


def test_bfloat16_autocast_trains_and_stays_close_to_float32(tester):
    model = tester.model(ElmoForBidirectionalLM)
    enc = tester.encode([["a", "b", "c"], ["d"]])
    labels = torch.tensor([[5, 6, 7], [8, -100, -100]])
    exact = model(**enc, labels=labels).loss
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**enc, labels=labels).loss
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert abs(loss.item() - exact.item()) < 0.05 * exact.item()
    assert model.elmo.char_encoder.projection.weight.grad is not None


def test_added_sentence_boundaries_are_the_tokenizers_boundary_rows(tester):
    from modeling_elmo import BOS_CHAR_IDS, EOS_CHAR_IDS
    from modeling_elmo.modeling_elmo import with_sentence_boundaries

    enc = tester.encode(SENTENCES)
    mask = enc["attention_mask"].bool()
    ids, new_mask = with_sentence_boundaries(enc["input_ids"], mask, mask.sum(1))
    for row, sentence in enumerate(SENTENCES):
        assert ids[row, 0].tolist() == list(BOS_CHAR_IDS) and ids[row, len(sentence) + 1].tolist() == list(EOS_CHAR_IDS)
        assert torch.equal(ids[row, 1 : len(sentence) + 1], enc["input_ids"][row, : len(sentence)])
        assert new_mask[row].sum() == len(sentence) + 2


def test_character_convolutions_run_as_conv1d_modules_that_hooks_see_and_torch_conv1d_agrees_with(tester):
    """Each filter width is a `Conv1d` called as a module (hooks and adapters wrapping Conv1d layers see it); its
    faster forward equals torch's own convolution kernel."""
    model = tester.model()
    seen = []

    def hook(module, args, output):
        seen.append(module)
        assert_same_numbers(output, torch.nn.Conv1d.forward(module, args[0]), rtol=1e-5, what="convolution")
        return output * 0  # a hook's replacement output is what the model uses

    convolutions = list(model.char_encoder.convolutions)
    assert all(isinstance(conv, torch.nn.Conv1d) for conv in convolutions)
    handles = [conv.register_forward_hook(hook) for conv in convolutions]
    try:
        with torch.no_grad():
            zeroed = run(model, SENTENCES).hidden_states[0]
    finally:
        for handle in handles:
            handle.remove()
    assert seen == convolutions  # each called once per call (the distinct words of the batch in one go)
    with torch.no_grad():
        normal = run(model, SENTENCES).hidden_states[0]
    assert not torch.allclose(zeroed, normal)  # the hooks' outputs were used


@pytest.mark.parametrize("word_input", [False, True], ids=["characters", "characters-and-words"])
def test_the_character_encoder_in_pieces_of_any_size_gives_the_numbers_of_one_piece(word_input, monkeypatch):
    """The CNN and the highways take `piece_sizes` words at a time: any sizes compute the same token vectors (with
    a word input too), also under gradient checkpointing. In inference on a CPU a CNN piece's largest product and a
    highway piece's temporaries hold at most 2**22 numbers (93 and 2048 words of the original model); elsewhere
    and in training the CNN takes 4096 words and the highways all."""
    from modeling_elmo.modeling_elmo import ElmoCharacterEncoder

    tester = ElmoModelTester(**({"word_input_vocab_size": 20, "word_input_dim": 3} if word_input else {}))
    model = tester.model()
    encoder = model.char_encoder
    ids = tester.encode(SENTENCES)["input_ids"].flatten(0, 1)
    word_ids = torch.arange(len(ids)) % 20 if word_input else None
    with torch.no_grad():
        whole = encoder.encode(ids, word_ids)
        words, rows = encoder.piece_sizes(encoder.char_embeddings(ids))
    assert len(ids) > 3 and min(words, rows) > len(ids)  # one piece of each above
    for sizes in ((1, 1), (3, 2), (5, 7)):
        monkeypatch.setattr(ElmoCharacterEncoder, "piece_sizes", lambda self, embedded, n=sizes: n)
        with torch.no_grad():
            torch.testing.assert_close(encoder.encode(ids, word_ids), whole, rtol=1e-6, atol=1e-6)
        model.gradient_checkpointing_enable()
        model.train()
        torch.testing.assert_close(encoder.encode(ids, word_ids), whole, rtol=1e-6, atol=1e-6)
        model.gradient_checkpointing_disable()
        model.eval()
    monkeypatch.undo()
    with torch.device("meta"):
        original = ElmoCharacterEncoder(ElmoConfig())
    characters = torch.empty(1, 50, original.char_embeddings.embedding_dim)
    largest = max((50 - conv.kernel_size[0] + 1) * conv.out_channels for conv in original.convolutions)
    assert original.piece_sizes(characters) == (93, 2048) and 93 * largest <= 2**22 < 94 * largest
    assert original.piece_sizes(torch.empty(3, 50, 16, device="meta")) == (4096, 3)
    assert original.piece_sizes(characters.requires_grad_()) == (4096, 1)  # training: the backward keeps them all


@pytest.mark.slow  # starts processes
def test_the_character_cnn_benchmark_times_every_piece_size_in_its_own_process():
    """``scripts/bench/bench_char_cnn.py`` (its figures are in docs/benchmarks.md) runs each piece size in a process
    of its own and reports the model's own choice under ``auto``."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_char_cnn.py"
    command = [sys.executable, str(script), "--preset", "elmo-tiny", "--pieces", "auto,7", "--repeats", "1"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    pieces = json.loads(done.stdout)["pieces"]
    assert [pieces[p]["words_per_piece"] for p in ("auto", "7")] == [5461, 7]  # elmo-tiny: 2**22 // (48 x 16)
    assert pieces["auto"]["words"] == pieces["7"]["words"] > 7 and all(p["seconds"] > 0 for p in pieces.values())


# ------------------------------------------------------------------ what transformers' clients pass and call
def test_inputs_embeds_are_the_character_encoders_token_vectors(tester):
    """The encoder's own output given as inputs_embeds reproduces the call with input_ids (left padding too)."""
    model = tester.model()
    for side in ("right", "left"):
        enc = tester.encode(padding_side=side)
        batch, steps, width = enc["input_ids"].shape
        with torch.no_grad():
            vectors = model.char_encoder.encode(enc["input_ids"].reshape(-1, width)).view(batch, steps, -1)
            direct = model(**enc, output_hidden_states=True)
            given = model(inputs_embeds=vectors, attention_mask=enc["attention_mask"], output_hidden_states=True)
        for a, b in zip(direct.hidden_states, given.hidden_states, strict=False):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    head = tester.model(ElmoForTokenClassification, num_labels=3)
    with torch.no_grad():
        vectors = head.elmo.char_encoder.encode(enc["input_ids"].reshape(-1, width)).view(batch, steps, -1)
        torch.testing.assert_close(
            head(inputs_embeds=vectors, attention_mask=enc["attention_mask"]).logits,
            head(**enc).logits,
            rtol=1e-5,
            atol=1e-6,
        )
    with pytest.raises(ValueError, match=r"inputs_embeds must be token vectors of shape \(batch, tokens, 8\)"):
        model(inputs_embeds=torch.zeros(1, 2, 16))
    with pytest.raises(ValueError, match="either input_ids or inputs_embeds, not both"):
        model(input_ids=enc["input_ids"], inputs_embeds=vectors)


def test_output_attentions_is_accepted_off_and_refused_on(tester):
    for cls in (ElmoModel, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForBidirectionalLM):
        model = tester.model(cls)
        model(**tester.encode(), output_attentions=False)
        with pytest.raises(ValueError, match=f"^{cls.__name__} has no attentions to return"):
            model(**tester.encode(), output_attentions=True)


def test_the_bidirectional_lm_returns_one_row_per_word_unless_boundaries_are_asked_for(tester):
    lm, enc = tester.model(ElmoForBidirectionalLM), tester.encode()
    with torch.no_grad():
        words = lm.elmo(**enc, output_hidden_states=True)
        out = lm(**enc, output_hidden_states=True)
        kept = lm(**enc, output_hidden_states=True, keep_sentence_boundaries=True)
    assert out.last_hidden_state.shape == words.last_hidden_state.shape
    for mine, base in zip(out.hidden_states, words.hidden_states, strict=False):
        torch.testing.assert_close(mine, base)
    assert kept.last_hidden_state.shape[1] == enc["input_ids"].shape[1] + 2
    torch.testing.assert_close(
        kept.last_hidden_state[:, 1:-1] * enc["attention_mask"][..., None], out.last_hidden_state
    )


def test_a_character_model_has_no_token_table_to_resize_and_refuses_in_one_line(tester, tmp_path):
    model = tester.model(ElmoForSequenceClassification, num_labels=2)
    assert model.get_input_embeddings() is None
    rows = model.elmo.char_encoder.char_embeddings.num_embeddings
    with pytest.raises(ValueError, match="reads characters and has no token-embedding table to resize"):
        model.resize_token_embeddings(13257)
    assert model.elmo.char_encoder.char_embeddings.num_embeddings == rows == model.config.num_characters
    model.save_pretrained(tmp_path)
    ElmoForSequenceClassification.from_pretrained(tmp_path)  # still reloads


def test_resizing_the_word_input_table_keeps_its_rows_and_the_model_reloads(tmp_path):
    tester = ElmoModelTester(word_input_vocab_size=10, word_input_dim=6, char_vocabulary="bytes")
    model = tester.model()
    table = model.get_input_embeddings()
    assert type(table).__name__ == "ElmoWordEmbedding" and table.num_embeddings == 10
    old = table.weight.detach().clone()
    new = model.resize_token_embeddings(13, pad_to_multiple_of=8)
    assert new is model.get_input_embeddings() and new.num_embeddings == 16 == model.config.word_input_vocab_size
    assert torch.equal(new.weight[:10], old) and model.config.vocab_size == tester.config.vocab_size
    model.save_pretrained(tmp_path)
    again = ElmoModel.from_pretrained(tmp_path)
    assert torch.equal(again.get_input_embeddings().weight, new.weight)
    with pytest.raises(ValueError, match="new_num_tokens must be an integer >= 4"):
        model.resize_token_embeddings(2)


def test_resizing_the_word_input_beyond_any_vocabulary_is_refused_before_allocating(monkeypatch):
    """10**9 words of 6 numbers would be 24 GB: refused with the bound a config's word input has, nothing built."""
    model = ElmoModelTester(word_input_vocab_size=10, word_input_dim=6).model()
    allocated = []
    monkeypatch.setattr(modeling, "ElmoWordEmbedding", lambda *a, **k: allocated.append(a))
    message = r"^new_num_tokens=1000000000: `word_input_vocab_size` must be an integer in \[0, 100,000,000\], got"
    with pytest.raises(ValueError, match=message):
        model.resize_token_embeddings(10**9)
    with pytest.raises(ValueError, match=r"`word_input_vocab_size` must be an integer in \[0, 100,000,000\]"):
        ElmoConfig(word_input_vocab_size=10**8 + 1, word_input_dim=6)
    assert not allocated and model.get_input_embeddings().num_embeddings == 10 == model.config.word_input_vocab_size
