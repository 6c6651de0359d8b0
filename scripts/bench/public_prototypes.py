"""Prototypes of a faster public-API recurrence (the form the files shipped with a model run), measured by
``bench_forward.py --forms public_threads,public_compiled``; each computes `lstm_kernels.stacked_lstm`'s numbers with
public torch APIs only and no process-wide setting, and is given to one model through ``ElmoBiLstm.recurrence``:

* ``public_threads``: the two directions of a layer each on its own Python thread (matrix products release the GIL),
  each direction's per-step products ``F.linear`` on its own weights; the intra-op thread count is left as it is;
* ``public_compiled``: each direction's step (both products and the cell) one ``torch.compile``d module with
  ``options={"freezing": True}``: inductor treats the weights as constants, prepacks the two products' weights
  (oneDNN or MKL packed GEMM) and fuses the element-wise work into one C++ kernel; the two directions one after
  the other (``public_compiled``) or each on its own Python thread (``public_compiled_threads``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn
from torch.nn import functional as F

from modeling_elmo.lstm_kernels import lstm_step


def _same_modes(run):
    """``run`` wrapped to execute in the caller's grad and inference modes (both are per thread)."""
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def wrapped(*args):
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return run(*args)

    return wrapped


class DirectionStep(nn.Module):
    """One step of one direction: gates_x (B, 4H), h (B, P), c (B, H), valid (B, 1) -> (h, c, y)."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.weight_hh, self.weight_hr = layer.recurrent_transform.weight, layer.projection.weight
        self.cell_clip, self.proj_clip = layer.cell_clip, layer.proj_clip

    def forward(self, gates_x, h, c, valid):
        gates = gates_x + F.linear(h, self.weight_hh)
        return lstm_step(gates, h, c, valid, lambda m: F.linear(m, self.weight_hr), self.cell_clip, self.proj_clip)


def _direction(inputs, valid, layer, state, step):
    """One direction of a layer: inputs (T, B, P), valid (T, B, 1) -> y (T, B, P), (h, c)."""
    P, H = layer.projection.weight.shape
    h, c = (inputs.new_zeros(inputs.shape[1], n) for n in (P, H)) if state is None else state
    gates_x = F.linear(inputs, layer.input_transform.weight, layer.input_transform.bias)
    outputs = []
    for t in range(inputs.shape[0]):
        h, c, y = step(gates_x[t], h, c, valid[t])
        outputs.append(y)
    return torch.stack(outputs), (h, c)


def make_recurrence(compiled: bool, threads: bool):
    """An ``ElmoBiLstm.recurrence`` (fp32): per-direction steps, compiled or not, on two threads or one."""
    steps: dict[int, nn.Module] = {}  # per layer module: its compiled step, made on first use

    def step_of(layer):
        if not compiled:
            return DirectionStep(layer)
        if id(layer) not in steps:
            steps[id(layer)] = torch.compile(DirectionStep(layer), options={"freezing": True})
        return steps[id(layer)]

    def recurrence(inputs, valid, layers, state=None):
        valid = valid.unsqueeze(-1)

        def run(d: int):
            own = None if state is None else (state[0][d], state[1][d])
            return _direction(inputs[d], valid, layers[d], own, step_of(layers[d]))

        if threads:
            with ThreadPoolExecutor(max_workers=len(layers)) as pool:
                results = list(pool.map(_same_modes(run), range(len(layers))))
        else:
            results = [run(d) for d in range(len(layers))]
        y = torch.stack([r[0] for r in results])
        return y, tuple(torch.stack([r[1][k] for r in results]) for k in (0, 1))

    return recurrence


PROTOTYPES = {
    "public_threads": make_recurrence(compiled=False, threads=True),
    "public_compiled": make_recurrence(compiled=True, threads=False),
    "public_compiled_threads": make_recurrence(compiled=True, threads=True),
}


def use_prototype(model: nn.Module, name: str) -> nn.Module:
    """Give every biLM of ``model`` the prototype recurrence ``name``."""
    for module in model.modules():
        if hasattr(module, "recurrence") and hasattr(module, "fused_forward"):
            module.recurrence = PROTOTYPES[name]
    return model
