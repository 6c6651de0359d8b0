"""The pretraining losses' softmax as single autograd nodes: the exact one (`FullSoftmaxNll`) and the sampled one
(`SampledSoftmaxNll`), for the rows of both directions at once. Each computes what the plain form computes
(`ElmoForBidirectionalLM.full_softmax_nll`; `pretraining.sampled_softmax.SampledSoftmaxLoss` written out in public
operators) and is tested equal to it, losses and every gradient; they are faster because

* the logits are made a block of rows at a time, small enough to stay in the cache from the product through the
  exponentials and their sum (a narrow output layer, such as elmo-tiny's 16 columns, otherwise spends its time
  moving a logits matrix of N x V numbers through memory again and again);
* they are exponentiated once, and the gradient of the logits is that buffer scaled (autograd's ``logsumexp``
  backward subtracts, exponentiates and multiplies again): the sampled form keeps the blocks for its backward; the
  exact form (`FullSoftmaxNll`) takes torch's fused softmax kernel and, for an output layer of a modest size, makes
  its gradients in the forward pass while each block is in the cache (else it makes the blocks again in the
  backward);
* the gradient of the output layer is one dense tensor, written by one product per block and a few ``index_add_``,
  instead of one zero-filled vocabulary-sized tensor per gathered row set and direction.

Training on the CPU in float32 only (`applies`); elsewhere, under autocast or in other dtypes the plain forms run.
The sampled form's backward scales its saved exponentials in place, so a graph through it is differentiated once (a
second backward raises).
"""

from __future__ import annotations

import torch

_TWICE = "the fused softmax's graph was already differentiated (retain_graph is not supported by its backward)"


def applies(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the fused forms run: float32 hiddens and output layer on the CPU, outside autocast."""
    return (
        hidden.device.type == "cpu"
        and hidden.dtype == torch.float32
        and weight.dtype == torch.float32
        and not torch.is_autocast_enabled(hidden.device.type)
    )


def _target_logits(hidden, weight, bias, targets):
    """``hidden[n] . weight[targets[n]] + bias[targets[n]]``, as the plain forms compute it."""
    return (hidden * weight[targets]).sum(-1) + bias[targets]


def rows_per_block(columns: int) -> int:
    """Rows of logits computed, exponentiated and summed together: about 2**18 numbers (1 MB), which stay in the
    cache from the product to the sum, and again in the backward, at least one row. (One thread of a 2-vCPU AMD EPYC,
    a fused exact softmax of 1,600 rows over 10,000 words of 16 columns, forward and backward: 224 ms in blocks of
    2**14 numbers, 73 ms of 2**16, 59 ms of 2**18, 64 ms of 2**20, 103 ms unblocked.)"""
    return max(1, 2**18 // max(1, columns))


def _blocked_forward(hidden, weight, bias, masked, true):
    """Per block of rows (`rows_per_block`): logits ``hidden @ weight.T + bias`` (-inf at ``masked``, a (rows,
    columns) index pair sorted by row, or `None`), exponentiated in place against the row's maximum (taken over
    ``true`` too, the target logits, when given: they then join the normaliser). Returns the log normalisers (N,),
    the row maxima (N,) and the blocks of exponentials."""
    block, exps, logs, tops = rows_per_block(weight.shape[0]), [], [], []
    bounds = None
    if masked is not None:
        bounds = torch.searchsorted(masked[0], torch.arange(0, len(hidden) + block, block)).tolist()
    for index, start in enumerate(range(0, len(hidden), block)):
        logits = torch.addmm(bias, hidden[start : start + block], weight.t())
        if bounds is not None and bounds[index + 1] > bounds[index]:
            rows, columns = (m[bounds[index] : bounds[index + 1]] for m in masked)
            logits.index_put_((rows - start, columns), logits.new_tensor(float("-inf")))
        top = logits.amax(dim=1) if logits.shape[1] else logits.new_full((len(logits),), float("-inf"))
        extra = None if true is None else true[start : start + block]
        if extra is not None:
            top = torch.maximum(top, extra)
        total = logits.sub_(top.unsqueeze(1)).exp_().sum(dim=1)
        if extra is not None:
            total += torch.exp(extra - top)
        exps.append(logits)
        tops.append(top)
        logs.append(total.log_().add_(top))
    if not exps:
        return hidden.new_zeros(0), hidden.new_zeros(0), exps
    return torch.cat(logs), torch.cat(tops), exps


def _blocked_backward(grad, hidden, weight, log_normaliser, tops, exps):
    """``grad`` (N,) times the gradients of the log normalisers for ``hidden``, ``weight`` and ``bias`` (those of the
    logits of `_blocked_forward`, not of ``true``): the saved exponentials scaled in place to softmax x gradient."""
    grad_hidden = torch.empty_like(hidden)
    grad_weight, grad_bias = torch.zeros_like(weight), weight.new_zeros(weight.shape[0])
    scale = grad * torch.exp(tops - log_normaliser)  # exp(logit - top) * exp(top - log normaliser) = softmax
    block = rows_per_block(weight.shape[0])
    for start, exp in zip(range(0, len(hidden), block), exps, strict=True):
        part = slice(start, start + block)
        probs = exp.mul_(scale[part].unsqueeze(1))
        torch.mm(probs, weight, out=grad_hidden[part])
        grad_weight.addmm_(probs.t(), hidden[part])
        grad_bias += probs.sum(dim=0)
    return grad_hidden, grad_weight, grad_bias


class _Once:
    """A backward that scales saved tensors in place runs once: a second one (``retain_graph``) raises."""

    @staticmethod
    def claim(ctx) -> None:
        if getattr(ctx, "used", False):
            raise RuntimeError(_TWICE)
        ctx.used = True


#: `FullSoftmaxNll` makes the output layer's gradients in its forward pass when they are at most this many numbers
#: (segments x (V x P + V)): 64 MiB of float32, ``elmo-tiny``'s 10,000 x 16 layer 200 times over.
EAGER_GRADIENT_NUMBERS = 2**24


class FullSoftmaxNll(torch.autograd.Function):
    """``-log softmax(hidden @ weight.T + bias)[n, targets[n]]`` (N,) for hidden (N, P), a block of rows at a time
    (`rows_per_block`), the probabilities through torch's fused softmax kernel (`_probability_blocks`).

    ``segments``: the row counts of consecutive groups of rows (the directions, `joined`) whose incoming gradient is
    the same number within each group, as a loss that averages or sums each group gives. Then the forward pass, while
    a block's probabilities are in the cache, also makes the gradients for a gradient of one per row (per group for
    the output layer, at most `EAGER_GRADIENT_NUMBERS` numbers), and the backward only scales them: each block's
    logits are made and exponentiated once per step instead of twice. A backward whose gradient is not constant
    within each group (any other weighting) makes each block's logits again and computes the exact gradients from
    them, as it does for a single group too large to keep: the memory is then one block whatever the vocabulary."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, segments=None):
        hidden, weight, bias = hidden.detach(), weight.detach(), bias.detach()
        segments = tuple(segments) if segments is not None else (len(hidden),)
        ctx.eager = any(ctx.needs_input_grad[:3]) and len(segments) * (weight.numel() + len(bias)) <= (
            EAGER_GRADIENT_NUMBERS
        )
        bounds = [(start - size, start) for start, size in zip(_running_sums(segments), segments, strict=True)]
        if not ctx.eager:
            logs = [log for _, _, log in _probability_blocks(hidden, weight, bias)]
            ctx.save_for_backward(hidden, weight, bias, targets)
            return _joined_or_empty(logs, hidden) - _target_logits(hidden, weight, bias, targets)
        grad_hidden = torch.empty_like(hidden)
        grad_weights = weight.new_zeros(len(segments), *weight.shape)
        grad_biases = bias.new_zeros(len(segments), len(bias))
        logs = []
        for index, (start, end) in enumerate(bounds):
            rows = hidden[start:end]
            for part, probs, log in _probability_blocks(rows, weight, bias):
                logs.append(log)
                torch.mm(probs, weight, out=grad_hidden[start:end][part])
                grad_weights[index].addmm_(probs.t(), rows[part])
                grad_biases[index] += probs.sum(dim=0)
            # the target logit's part: -1 on its row of the output layer
            grad_weights[index].index_add_(0, targets[start:end], rows, alpha=-1)
            grad_biases[index].index_add_(0, targets[start:end], bias.new_ones(end - start), alpha=-1)
        grad_hidden.sub_(weight[targets])
        ctx.bounds = bounds
        ctx.save_for_backward(hidden, weight, bias, targets, grad_hidden, grad_weights, grad_biases)
        return _joined_or_empty(logs, hidden) - _target_logits(hidden, weight, bias, targets)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        hidden, weight, bias, targets, *made = ctx.saved_tensors
        if ctx.eager and all(bool((grad[start:end] == grad[start]).all()) for start, end in ctx.bounds if end > start):
            grad_hidden, grad_weights, grad_biases = made
            scales = torch.stack([grad[start] if end > start else grad.new_zeros(()) for start, end in ctx.bounds])
            grad_weight = (grad_weights * scales.view(-1, 1, 1)).sum(dim=0)
            return grad_hidden * grad.unsqueeze(1), grad_weight, scales @ grad_biases, None, None
        grad_hidden, grad_weight, grad_bias = torch.empty_like(hidden), torch.zeros_like(weight), torch.zeros_like(bias)
        for part, probs, _ in _probability_blocks(hidden, weight, bias):
            scale = grad[part].unsqueeze(1)  # on the narrow operands: the blocks are read by the products only
            torch.mm(probs, weight, out=grad_hidden[part]).mul_(scale)
            grad_weight.addmm_(probs.t(), hidden[part] * scale)
            grad_bias.addmv_(probs.t(), grad[part])
        # the target logit's part: -grad on its row of the output layer
        grad_hidden.addcmul_(grad.unsqueeze(1), weight[targets], value=-1)
        grad_weight.index_add_(0, targets, hidden * grad.unsqueeze(1), alpha=-1)
        grad_bias.index_add_(0, targets, grad, alpha=-1)
        return grad_hidden, grad_weight, grad_bias, None, None


def _running_sums(sizes) -> list[int]:
    total, sums = 0, []
    for size in sizes:
        total += size
        sums.append(total)
    return sums


def _joined_or_empty(parts: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    return torch.cat(parts) if parts else like.new_zeros(0)


def _probability_blocks(hidden, weight, bias):
    """(rows, softmax of the logits, log normalisers) per block of rows, the probabilities from torch's fused softmax
    kernel (about twice as fast as subtracting the maximum and exponentiating in place), the logits and probabilities
    in two reused buffers (valid until the next block). The log normaliser is the largest logit less the log of the
    largest probability (that logit's, never below 1 / V: no underflow)."""
    block = rows_per_block(weight.shape[0])
    logits_buffer = hidden.new_empty(min(block, len(hidden)), weight.shape[0])
    probs_buffer = torch.empty_like(logits_buffer)
    for start in range(0, len(hidden), block):
        rows = hidden[start : start + block]
        logits = torch.addmm(bias, rows, weight.t(), out=logits_buffer[: len(rows)])
        probs = torch.softmax(logits, dim=1, out=probs_buffer[: len(rows)])
        yield slice(start, start + len(rows)), probs, logits.amax(dim=1).sub_(probs.amax(dim=1).log_())


class SampledSoftmaxNll(torch.autograd.Function):
    """The sampled softmax's ``-log`` probability of each target (N,): the target's logit against the logits of the
    ``sampled`` rows (S,) less their log expected counts ``log_q`` (S,), a sampled row equal to the target left out
    (accidental hit)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, sampled, log_q):
        hidden, weight, bias = hidden.detach(), weight.detach(), bias.detach()
        # accidental hits are rare: compare only the rows whose target was drawn; (rows, columns) sorted by row
        drawn = torch.zeros(weight.shape[0], dtype=torch.bool, device=weight.device)
        drawn[sampled] = True
        rows = drawn[targets].nonzero().squeeze(1)
        hit_rows, hit_columns = (sampled.unsqueeze(0) == targets[rows].unsqueeze(1)).nonzero().unbind(1)
        masked = (rows[hit_rows], hit_columns)
        sampled_weight = weight[sampled]  # (S, P)
        true = _target_logits(hidden, weight, bias, targets)  # (N,)
        log_normaliser, tops, exps = _blocked_forward(hidden, sampled_weight, bias[sampled] - log_q, masked, true)
        ctx.save_for_backward(hidden, weight, targets, sampled, sampled_weight, true, log_normaliser, tops, *exps)
        return log_normaliser - true

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        _Once.claim(ctx)
        hidden, weight, targets, sampled, sampled_weight, true, log_normaliser, tops, *exps = ctx.saved_tensors
        grad_hidden, grad_rows, grad_row_bias = _blocked_backward(
            grad, hidden, sampled_weight, log_normaliser, tops, exps
        )
        grad_true = grad * torch.exp(true - log_normaliser) - grad  # (N,): its softmax share less one
        grad_hidden.addcmul_(grad_true.unsqueeze(1), weight[targets])
        grad_weight = torch.zeros_like(weight).index_add_(0, sampled, grad_rows)
        grad_weight.index_add_(0, targets, hidden * grad_true.unsqueeze(1))
        grad_bias = weight.new_zeros(weight.shape[0]).index_add_(0, sampled, grad_row_bias)
        grad_bias.index_add_(0, targets, grad_true)
        return grad_hidden, grad_weight, grad_bias, None, None, None


def joined(loss, hiddens: list[torch.Tensor], targets: list[torch.Tensor], layer, *args) -> list[torch.Tensor]:
    """``loss`` (`FullSoftmaxNll` or `SampledSoftmaxNll`) through the output layer ``layer`` (an `nn.Linear`) on the
    rows of all directions at once, split back per direction."""
    nlls = loss.apply(torch.cat(hiddens), layer.weight, layer.bias, torch.cat(targets), *args)
    return list(nlls.split([len(t) for t in targets]))


__all__ = ["FullSoftmaxNll", "SampledSoftmaxNll", "applies", "joined"]
