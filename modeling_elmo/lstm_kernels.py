# Copyright 2026 The modeling_elmo Authors. All rights reserved.
# Licensed under the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0).
"""The biLM's fast recurrence in public torch operators, and helpers shared by every form of it.

`stacked_lstm` computes what `ElmoLstmLayer.forward` (the reference loop) computes, for both directions at once:
the input products of all steps per direction, then per step two ``bmm`` over the stacked recurrent weights;
autograd differentiates it. Layout: direction-major and time-major, ``(D, T, B, width)``. In bfloat16 or float16
only the products run in that dtype; state, cell and gate sums stay in float32 (`state_dtype`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F


def weights_readable(*layer_lists: Sequence[nn.Module]) -> bool:
    """Whether the fast forms may read the layers' weights: every transform a plain `nn.Linear` without hooks.
    A wrapped transform (a PEFT adapter) or a hooked one must run as a module: the reference loop does that."""
    for layers in layer_lists:
        for layer in layers:
            for linear in (layer.input_transform, layer.recurrent_transform, layer.projection):
                if type(linear) is not nn.Linear or linear._forward_hooks or linear._forward_pre_hooks:
                    return False
    return True


def fused_applies(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the fused recurrence runs for inputs on ``device`` in ``dtype``: the CPU and CUDA (ROCm included), in a
    floating-point dtype; elsewhere (MPS, XLA, ...) the model uses the reference loop."""
    return device.type in ("cpu", "cuda") and dtype.is_floating_point


def reverse_each_row(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first ``lengths[b]`` steps of every row of ``x`` (B, T, ...), leaving the padding in place."""
    steps = x.shape[1]
    positions = torch.arange(steps, device=x.device).unsqueeze(0)  # (1, T)
    index = torch.where(positions < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - positions, positions)  # (B, T)
    index = index.view(index.shape + (1,) * (x.dim() - 2)).expand_as(x)
    return x.gather(1, index)


def dropout_noise(like: torch.Tensor, dropout: float, num_layers: int) -> list[torch.Tensor] | None:
    """Scaled dropout masks (2, T, B, P) of every layer's input for the fused forms (``like`` is (B, T, P)), drawn
    in the reference loop's order (forward stack's layers, then the backward stack's), each as ``F.dropout`` draws
    it: with the same seed, the same units are dropped. `None` without dropout."""
    if dropout <= 0:
        return None
    ones = torch.ones_like(like)
    drawn = [[F.dropout(ones, dropout) for _ in range(num_layers)] for _ in range(2)]
    return [torch.stack(pair).transpose(1, 2) for pair in zip(*drawn, strict=False)]


def torch_lstm(x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
    """``torch.nn.LSTM(proj_size=P)`` (cuDNN on a GPU) on ``layer``'s weights, x (B, T, P) -> (B, T, P), from zero
    states, no clipping (`torch.func.functional_call` on a module of the right shapes, on the meta device)."""
    weight_ih, bias = layer.input_transform.weight, layer.input_transform.bias
    cell = torch.nn.LSTM(
        weight_ih.shape[1], layer.cell_size, proj_size=layer.hidden_size, batch_first=True, device="meta"
    )
    names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0")
    tensors = (weight_ih, layer.recurrent_transform.weight, bias, torch.zeros_like(bias), layer.projection.weight)
    return torch.func.functional_call(cell, dict(zip(names, tensors, strict=True)), (x,))[0]


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the recurrence's state, cell and gate sums: float32 at least (bfloat16 runs only the products)."""
    return torch.promote_types(dtype, torch.float32)


def lstm_step(gates, h, c, valid, project, cell_clip: float | None, proj_clip: float | None):
    """One step from the gate pre-activations (i, f, g, o) -> next (h, c) and this step's output. ``project`` maps the
    projection's input to the output (unclipped); a padded step (``valid`` False) keeps the state, outputs zeros."""
    i, f, g, o = gates.chunk(4, dim=-1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    if cell_clip is not None:
        c_new = c_new.clamp(-cell_clip, cell_clip)
    h_new = project(torch.sigmoid(o) * torch.tanh(c_new)).to(h.dtype)
    if proj_clip is not None:
        h_new = h_new.clamp(-proj_clip, proj_clip)
    return torch.where(valid, h_new, h), torch.where(valid, c_new, c), h_new * valid


def stacked_lstm(
    inputs: torch.Tensor,
    valid: torch.Tensor,
    layers: Sequence[nn.Module],
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One layer of the LSTM with a clipped projection for ``len(layers)`` directions (`ElmoLstmLayer`s with the same
    clips) at once: inputs (D, T, B, P), valid (T, B) True on each row's valid prefix, state (h (D, B, P), c (D, B, H))
    or zeros -> y (D, T, B, P) in the inputs' dtype, zeros past each row's length, and the final (h, c) in
    `state_dtype`, carried over padded steps."""
    directions, steps, rows, _ = inputs.shape
    dtype, cell_clip, proj_clip = inputs.dtype, layers[0].cell_clip, layers[0].proj_clip
    P, H = layers[0].projection.weight.shape
    h, c = (inputs.new_zeros(directions, rows, n) for n in (P, H)) if state is None else state
    h, c = h.to(state_dtype(dtype)), c.to(state_dtype(dtype))
    # the input products of all steps per direction, the recurrent ones over stacked weights (D, P, 4H), (D, H, P)
    gates_x = [
        F.linear(x, ls.input_transform.weight, ls.input_transform.bias).unbind(0)
        for x, ls in zip(inputs, layers, strict=True)
    ]
    weight_hh = torch.stack([layer.recurrent_transform.weight for layer in layers]).transpose(1, 2)
    weight_hr = torch.stack([layer.projection.weight for layer in layers]).transpose(1, 2)
    valid = valid.unsqueeze(-1).unbind(0)  # T x (B, 1)
    outputs = []
    for t in range(steps):
        gates = torch.stack([g[t] for g in gates_x]).to(h.dtype) + torch.bmm(h.to(dtype), weight_hh)
        h, c, y = lstm_step(gates, h, c, valid[t], lambda m: torch.bmm(m.to(dtype), weight_hr), cell_clip, proj_clip)
        outputs.append(y)
    if not outputs:
        return inputs.new_zeros(directions, 0, rows, P), (h, c)
    return torch.stack(outputs, dim=1).to(dtype), (h, c)
