"""The sampled softmax of pretraining (`pretraining.sampled_softmax`): an estimate of the exact loss, used in training
only, through transformers' ``model.loss_function``."""

import torch
from support.model import SENTENCES, ElmoModelTester

from modeling_elmo import ElmoForBidirectionalLM
from modeling_elmo.pretraining.sampled_softmax import (
    FullSoftmaxLoss,
    SampledSoftmaxLoss,
    log_uniform_sample,
    use_configured_softmax,
)


def test_sampled_softmax_loss_estimates_the_full_loss():
    tester = ElmoModelTester(vocab_size=300, lm_softmax="sampled", num_negative_samples=150)
    model = tester.model(ElmoForBidirectionalLM)
    h, t = torch.randn(64, 8), torch.randint(0, 300, (64,))
    full = model.full_softmax_nll(h, t).mean()
    torch.manual_seed(1)
    loss = SampledSoftmaxLoss(model.softmax, 150)
    estimates = torch.stack([loss([h], [t])[0].mean() for _ in range(200)])
    # importance sampling of the normaliser: close to the exact loss on average (Jensen's bias shrinks with samples)
    assert abs(estimates.mean().item() - full.item()) / full.item() < 0.03, (estimates.mean(), full)
    assert estimates.std().item() < 0.1 * full.item()


def test_log_uniform_sample_follows_the_zipfian_distribution():
    generator = torch.Generator().manual_seed(0)
    ids, log_expected = log_uniform_sample(1000, 200_000, torch.device("cpu"), generator)
    frequency = torch.bincount(ids, minlength=1000).double() / ids.numel()
    expected = torch.log(torch.tensor([2.0, 3.0, 11.0]) / torch.tensor([1.0, 2.0, 10.0])) / torch.log(
        torch.tensor(1001.0)
    )
    p = expected.double()
    assert ((frequency[[0, 1, 9]] - p).abs() < 4 * (p * (1 - p) / ids.numel()).sqrt()).all()  # 4 binomial sigmas
    torch.testing.assert_close(log_expected[ids == 0][0], torch.log(200_000 * expected[0]), rtol=1e-5, atol=0)


def test_configured_sampled_softmax_trains_and_evaluation_stays_exact():
    tester = ElmoModelTester(vocab_size=300, lm_softmax="sampled", num_negative_samples=20, hidden_dropout_prob=0.0)
    plain = tester.model(ElmoForBidirectionalLM)
    sampled = use_configured_softmax(tester.model(ElmoForBidirectionalLM))
    assert isinstance(sampled.loss_function, SampledSoftmaxLoss)
    exact = use_configured_softmax(ElmoModelTester(vocab_size=300).model(ElmoForBidirectionalLM))
    assert isinstance(exact.loss_function, FullSoftmaxLoss) and exact.loss_function.softmax is exact.softmax
    enc = tester.encode(SENTENCES)
    labels = torch.randint(4, 300, enc["attention_mask"].shape).masked_fill(enc["attention_mask"] == 0, -100)
    with torch.no_grad():
        assert torch.equal(sampled.eval()(**enc, labels=labels).loss, plain.eval()(**enc, labels=labels).loss)
        exact = plain.train()(**enc, labels=labels).loss
        estimate = sampled.train()(**enc, labels=labels).loss
    assert not torch.equal(estimate, exact)  # 20 of 300 words: an estimate, not the exact loss
    assert torch.isfinite(estimate) and estimate > 0
