"""Prototypes of a faster public-API recurrence (the form the files shipped with a model run), measured by
``scripts/bench/bench_forward.py --forms public_threads,public_columns``: `modeling_elmo.stacked_lstm`'s numbers
with public torch APIs only and no process-wide setting, given to one model through
``ElmoBiLstm.recurrence``. ``public_threads``: the two directions of a layer each on its own Python thread (matrix
products release the GIL), each direction's per-step
products ``F.linear`` on its own weights, the intra-op thread count left as it is (``torch.set_num_threads`` is
process-wide). ``public_columns``: the state as columns, the weights as the left operands (no weight copies).

Also tried, not kept: each direction's step as one ``torch.compile``d module with ``options={"freezing": True}``
(torch 2.13 ignores ``freezing`` given that way: the weights stay graph inputs; ``bench_step_products.py`` times
the compiled product).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn
from torch.nn import functional as F

from modeling_elmo.modeling_elmo import lstm_step


def _same_modes(run):
    """``run`` wrapped to execute in the caller's grad and inference modes (both are per thread)."""
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def wrapped(*args):
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return run(*args)

    return wrapped


def _direction(inputs, valid, layer, state):
    """One direction of a layer: inputs (T, B, P), valid (T, B, 1) -> y (T, B, P), (h, c)."""
    P, H = layer.projection.weight.shape
    h, c = (inputs.new_zeros(inputs.shape[1], n) for n in (P, H)) if state is None else state
    gates_x = F.linear(inputs, layer.input_transform.weight, layer.input_transform.bias)
    weight_hh, weight_hr, clips = (
        layer.recurrent_transform.weight,
        layer.projection.weight,
        (layer.cell_clip, layer.proj_clip),
    )
    outputs = []
    for t in range(inputs.shape[0]):
        h, c, y = lstm_step(
            gates_x[t] + F.linear(h, weight_hh), h, c, valid[t], lambda m: F.linear(m, weight_hr), *clips
        )
        outputs.append(y)
    return torch.stack(outputs), (h, c)


def threaded_lstm(inputs, valid, layers, state=None):
    """`modeling_elmo.stacked_lstm`'s signature and numbers (fp32), each direction on its own Python thread."""
    valid = valid.unsqueeze(-1)

    def run(d: int):
        return _direction(inputs[d], valid, layers[d], None if state is None else (state[0][d], state[1][d]))

    with ThreadPoolExecutor(max_workers=len(layers)) as pool:
        results = list(pool.map(_same_modes(run), range(len(layers))))
    y = torch.stack([r[0] for r in results])
    return y, tuple(torch.stack([r[1][k] for r in results]) for k in (0, 1))


def columns_lstm(inputs, valid, layers, state=None):
    """`modeling_elmo.stacked_lstm`'s numbers (fp32) with the state as columns: per step and direction
    ``W_hh @ h`` (4H x P by P x B) and ``W_hr @ m``, the weight the left operand in its stored layout, the gate
    blocks contiguous rows; no weight copies."""
    directions, steps, rows, _ = inputs.shape
    P, H = layers[0].projection.weight.shape
    cell_clip, proj_clip = layers[0].cell_clip, layers[0].proj_clip
    if state is None:
        h, c = inputs.new_zeros(directions, P, rows), inputs.new_zeros(directions, H, rows)
    else:
        h, c = state[0].transpose(1, 2), state[1].transpose(1, 2)
    gates_x = [
        torch.matmul(layer.input_transform.weight, x.transpose(1, 2)) + layer.input_transform.bias.unsqueeze(-1)
        for x, layer in zip(inputs, layers, strict=True)
    ]  # (T, 4H, B) per direction
    keep = valid.unsqueeze(1).to(inputs.dtype)  # (T, 1, B)
    outputs, hs, cs = [[] for _ in layers], list(h.unbind(0)), list(c.unbind(0))
    for t in range(steps):
        for d, layer in enumerate(layers):
            i, f, g, o = torch.addmm(gates_x[d][t], layer.recurrent_transform.weight, hs[d]).chunk(4, dim=0)
            cell = torch.sigmoid(f) * cs[d] + torch.sigmoid(i) * torch.tanh(g)
            if cell_clip is not None:
                cell = cell.clamp(-cell_clip, cell_clip)
            new = layer.projection.weight @ (torch.sigmoid(o) * torch.tanh(cell))
            if proj_clip is not None:
                new = new.clamp(-proj_clip, proj_clip)
            hs[d], cs[d] = torch.lerp(hs[d], new, keep[t]), torch.lerp(cs[d], cell, keep[t])
            outputs[d].append(new * keep[t])
    y = torch.stack([torch.stack(o) for o in outputs]).transpose(2, 3).contiguous()  # (D, T, B, P)
    return y, (torch.stack(hs).transpose(1, 2), torch.stack(cs).transpose(1, 2))


PROTOTYPES = {"public_threads": threaded_lstm, "public_columns": columns_lstm}


def use_prototype(model: nn.Module, name: str) -> nn.Module:
    """Give every biLM of ``model`` the prototype recurrence ``name``."""
    for module in model.modules():
        if hasattr(module, "recurrence") and hasattr(module, "recurrence_for"):
            module.recurrence = PROTOTYPES[name]
    return model
