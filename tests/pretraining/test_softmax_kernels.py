"""The fused pretraining softmaxes (`acceleration.softmax_kernels`): the same losses and gradients as the plain forms
(the model's exact softmax; the sampled softmax written out in autograd operators), one node for both directions."""

import pytest
import torch
from support import assert_same_numbers
from support.model import ElmoModelTester
from torch.nn import functional as F

from modeling_elmo import ElmoForBidirectionalLM
from modeling_elmo.acceleration import softmax_kernels
from modeling_elmo.pretraining.sampled_softmax import (
    FullSoftmaxLoss,
    SampledSoftmaxLoss,
    log_uniform_sample,
    use_configured_softmax,
)

VOCAB, WIDTH = 300, 8


def plain_sampled_nll(layer, hidden, targets, sampled, log_q):
    """The sampled softmax in autograd's operators: true logit against the sample's corrected logits, hits removed."""
    weight, bias = layer.weight, layer.bias
    true = (hidden * weight[targets]).sum(-1) + bias[targets]
    others = F.linear(hidden, weight[sampled], bias[sampled]) - log_q
    others = others.masked_fill(sampled.unsqueeze(0) == targets.unsqueeze(1), float("-inf"))
    logits = torch.cat([true.unsqueeze(1), others], dim=1)
    return torch.logsumexp(logits, dim=1) - logits[:, 0]


def losses_and_gradients(layer, loss, rows=50):
    """``loss(hidden, targets)`` (N,), and the gradients of a weighted sum of it for the hiddens and the layer."""
    hidden = torch.randn(rows, WIDTH, generator=torch.Generator().manual_seed(1)).requires_grad_()
    targets = torch.randint(0, VOCAB, (rows,), generator=torch.Generator().manual_seed(2))
    layer.zero_grad()
    nll = loss(hidden, targets)
    (nll * torch.linspace(0.5, 1.5, rows)).sum().backward()
    return nll.detach(), hidden.grad, layer.weight.grad.clone(), layer.bias.grad.clone()


@pytest.fixture(params=[None, 7], ids=["one-block", "blocks-of-7-rows"])
def block_rows(request, monkeypatch):
    """The fused forms' rows per block: their own choice (one block here), or 7 (many blocks, hits in several)."""
    if request.param is not None:
        monkeypatch.setattr(softmax_kernels, "rows_per_block", lambda columns: request.param)


@pytest.mark.parametrize("chunk", [VOCAB, 64])
def test_fused_full_softmax_has_the_exact_softmax_losses_and_gradients(chunk, block_rows):
    model = ElmoModelTester(vocab_size=VOCAB, lm_softmax_chunk_size=chunk).model(ElmoForBidirectionalLM)
    layer = model.softmax
    expected = losses_and_gradients(layer, model.full_softmax_nll)
    actual = losses_and_gradients(layer, lambda h, t: softmax_kernels.FullSoftmaxNll.apply(h, *layer.parameters(), t))
    for name, a, e in zip(("nll", "hidden", "weight", "bias"), actual, expected, strict=True):
        assert_same_numbers(a, e, what=name)


@pytest.mark.parametrize("eager_limit", [None, 0], ids=["gradients-in-forward", "too-large-to-keep"])
@pytest.mark.parametrize("weighting", ["per-segment", "per-row"])
def test_fused_full_softmax_makes_each_block_once_for_per_direction_losses_with_exact_gradients(
    eager_limit, weighting, block_rows, monkeypatch
):
    """Segments (the directions) of 20, 0 and 30 rows: a gradient constant within each (a mean per direction) gets the
    gradients made in the forward pass, each block of logits made once; any other gradient, or an output layer above
    the limit, makes the blocks again in the backward. The same numbers as the plain softmax every way."""
    if eager_limit is not None:
        monkeypatch.setattr(softmax_kernels, "EAGER_GRADIENT_NUMBERS", eager_limit)
    made = []  # the rows of logits made
    blocks = softmax_kernels._probability_blocks

    def counted(*args):
        for part, probs, log in blocks(*args):
            made.append(len(probs))
            yield part, probs, log

    monkeypatch.setattr(softmax_kernels, "_probability_blocks", counted)
    model = ElmoModelTester(vocab_size=VOCAB).model(ElmoForBidirectionalLM)
    layer, segments = model.softmax, (20, 0, 30)
    weights = torch.cat([torch.full((n,), 1.0 / (n or 1)) * (k + 1) for k, n in enumerate(segments)])
    if weighting == "per-row":
        weights = weights * torch.linspace(0.5, 1.5, 50)

    def run(loss):
        hidden = torch.randn(50, WIDTH, generator=torch.Generator().manual_seed(1)).requires_grad_()
        targets = torch.randint(0, VOCAB, (50,), generator=torch.Generator().manual_seed(2))
        layer.zero_grad()
        nll = loss(hidden, targets)
        (nll * weights).sum().backward()
        return nll.detach(), hidden.grad, layer.weight.grad.clone(), layer.bias.grad.clone()

    expected = run(model.full_softmax_nll)
    made.clear()
    actual = run(lambda h, t: softmax_kernels.FullSoftmaxNll.apply(h, *layer.parameters(), t, segments))
    for name, a, e in zip(("nll", "hidden", "weight", "bias"), actual, expected, strict=True):
        assert_same_numbers(a, e, what=name)
    assert sum(made) == 50 * (1 + (weighting == "per-row" or eager_limit == 0))


def test_fused_sampled_softmax_has_the_plain_losses_and_gradients_with_accidental_hits(block_rows):
    layer = torch.nn.Linear(WIDTH, VOCAB)
    sampled, log_q = log_uniform_sample(VOCAB, 40, torch.device("cpu"), torch.Generator().manual_seed(3))

    def with_hits(loss):  # some targets are drawn words (some twice): their logits must be left out
        return lambda h, t: loss(h, torch.cat([sampled[:5], t[5:20], sampled[10:12], t[22:]]))

    expected = losses_and_gradients(layer, with_hits(lambda h, t: plain_sampled_nll(layer, h, t, sampled, log_q)))
    actual = losses_and_gradients(
        layer,
        with_hits(lambda h, t: softmax_kernels.SampledSoftmaxNll.apply(h, *layer.parameters(), t, sampled, log_q)),
    )
    for name, a, e in zip(("nll", "hidden", "weight", "bias"), actual, expected, strict=True):
        assert_same_numbers(a, e, what=name)
    assert torch.isfinite(actual[0]).all()


def test_configured_losses_join_the_directions_and_match_their_plain_forms():
    tester = ElmoModelTester(vocab_size=VOCAB)
    model = use_configured_softmax(tester.model(ElmoForBidirectionalLM))
    assert isinstance(model.loss_function, FullSoftmaxLoss)
    hiddens = [torch.randn(n, WIDTH, generator=torch.Generator().manual_seed(n)) for n in (7, 0, 12)]
    targets = [torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(n)) for n in (7, 0, 12)]
    for actual, expected in zip(
        model.loss_function(hiddens, targets), model.full_softmax_nlls(hiddens, targets), strict=True
    ):
        assert_same_numbers(actual.detach(), expected.detach())
    sampled_loss = SampledSoftmaxLoss(model.softmax, 30)
    torch.manual_seed(4)
    fused = sampled_loss(hiddens, targets)
    torch.manual_seed(4)  # the same draw
    sampled, log_q = log_uniform_sample(VOCAB, 30, torch.device("cpu"))
    plain = [plain_sampled_nll(model.softmax, h, t, sampled, log_q) for h, t in zip(hiddens, targets, strict=True)]
    for actual, expected in zip(fused, plain, strict=True):
        assert_same_numbers(actual, expected)


def test_fused_softmax_runs_only_in_float32_outside_autocast():
    layer = torch.nn.Linear(WIDTH, VOCAB)
    assert softmax_kernels.applies(torch.zeros(2, WIDTH), layer.weight)
    assert not softmax_kernels.applies(torch.zeros(2, WIDTH, dtype=torch.bfloat16), layer.weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not softmax_kernels.applies(torch.zeros(2, WIDTH), layer.weight)


def test_fused_sampled_softmax_refuses_a_second_backward_and_the_exact_one_allows_it():
    layer, targets = torch.nn.Linear(WIDTH, VOCAB), torch.tensor([1, 2, 3, 4])
    hidden = torch.randn(4, WIDTH, requires_grad=True)
    sampled, log_q = log_uniform_sample(VOCAB, 40, torch.device("cpu"), torch.Generator().manual_seed(3))
    loss = softmax_kernels.SampledSoftmaxNll.apply(hidden, layer.weight, layer.bias, targets, sampled, log_q)
    loss.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="already differentiated"):  # its saved exponentials were scaled in place
        loss.sum().backward()
    loss = softmax_kernels.FullSoftmaxNll.apply(hidden, layer.weight, layer.bias, targets)  # keeps no logits
    first = torch.autograd.grad(loss.sum(), hidden, retain_graph=True)[0]
    assert torch.equal(torch.autograd.grad(loss.sum(), hidden)[0], first)
