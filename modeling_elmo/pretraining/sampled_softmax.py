"""The sampled softmax that trains the large-vocabulary biLMs (``config.lm_softmax="sampled"``), as bilm-tf trains
them: each batch draws ``config.num_negative_samples`` word ids from a log-uniform (Zipfian) distribution over the
frequency-sorted vocabulary, shared by both directions; the true word's logit competes with the sample's logits
minus their log expected counts (log-Q correction), accidental hits removed. It replaces the exact softmax of
`ElmoForBidirectionalLM` in training through transformers' ``model.loss_function``; evaluation stays exact."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..acceleration import softmax_kernels


def log_uniform_sample(vocab_size: int, num_samples: int, device: torch.device, generator=None):
    """Word ids drawn with replacement from P(k) = log((k+2)/(k+1)) / log(V+1) (ids sorted by decreasing
    frequency), and their log expected counts ``log(num_samples * P(k))``."""
    u = torch.rand(num_samples, device=device, generator=generator)
    ids = (torch.exp(u * math.log(vocab_size + 1)) - 1).floor().long().clamp_(0, vocab_size - 1)
    probability = (torch.log(ids.double() + 2) - torch.log(ids.double() + 1)) / math.log(vocab_size + 1)
    return ids, torch.log(num_samples * probability).float()


class SampledSoftmaxLoss:
    """``(hiddens, targets) -> nlls`` for the (hidden (N, P), targets (N,)) pairs of both directions, through the
    rows of ``softmax`` (the model's output layer) that one shared negative sample selects."""

    def __init__(self, softmax: nn.Linear, num_samples: int):
        self.softmax, self.num_samples = softmax, num_samples

    def __call__(self, hiddens: list[torch.Tensor], targets: list[torch.Tensor]) -> list[torch.Tensor]:
        weight, bias = self.softmax.weight, self.softmax.bias
        sampled, log_q = log_uniform_sample(weight.shape[0], self.num_samples, weight.device)
        if all(softmax_kernels.applies(hidden, weight) for hidden in hiddens):  # one fused node, same numbers
            return softmax_kernels.joined(
                softmax_kernels.SampledSoftmaxNll, hiddens, targets, self.softmax, sampled, log_q
            )
        losses = []
        for hidden, target in zip(hiddens, targets, strict=True):
            true_logit = (hidden * weight[target]).sum(-1) + bias[target]
            sample_logits = F.linear(hidden, weight[sampled], bias[sampled]) - log_q.to(hidden.dtype)  # (N, S)
            sample_logits = sample_logits.masked_fill(sampled.unsqueeze(0) == target.unsqueeze(1), float("-inf"))
            logits = torch.cat([true_logit.unsqueeze(1), sample_logits], dim=1).float()
            losses.append(torch.logsumexp(logits, dim=1) - logits[:, 0])
        return losses


class FullSoftmaxLoss:
    """``(hiddens, targets) -> nlls`` of the exact softmax through ``softmax`` (the model's output layer):
    `ElmoForBidirectionalLM.full_softmax_nll`'s numbers, both directions in one fused node where it applies
    (`acceleration.softmax_kernels`; its memory bounded by blocks of rows), else ``plain`` (the model's own)."""

    def __init__(self, softmax: nn.Linear, plain):
        self.softmax, self.plain = softmax, plain

    def __call__(self, hiddens: list[torch.Tensor], targets: list[torch.Tensor]) -> list[torch.Tensor]:
        if all(softmax_kernels.applies(hidden, self.softmax.weight) for hidden in hiddens):
            segments = tuple(len(target) for target in targets)  # one incoming gradient per direction, in practice
            return softmax_kernels.joined(softmax_kernels.FullSoftmaxNll, hiddens, targets, self.softmax, segments)
        return self.plain(hiddens, targets)


def use_configured_softmax(model: nn.Module) -> nn.Module:
    """``model`` (an `ElmoForBidirectionalLM`) training with the softmax its config names: the sampled one for
    ``lm_softmax="sampled"``, else the exact one (`FullSoftmaxLoss`). Returns the model."""
    if model.config.lm_softmax == "sampled":
        model.loss_function = SampledSoftmaxLoss(model.softmax, model.config.num_negative_samples)
    else:
        model.loss_function = FullSoftmaxLoss(model.softmax, model.full_softmax_nlls)
    return model
