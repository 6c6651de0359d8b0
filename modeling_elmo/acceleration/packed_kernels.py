"""The installed package's fast forms of the biLM's recurrence, never shipped to the Hub with a model: the shipped
model file checks that this module is there (as transformers' Mamba checks for ``mamba_ssm``) and, where its
``config.use_packed_kernels`` says so, calls `packed_lstm` with the layer's tensors and settings. Nothing here reads
the model file.

`clipped_lstm` computes what the shipped `modeling_elmo.stacked_lstm` (and the reference loop) computes, from the
same tensors, and is tested equal to it (outputs, final states and every gradient):

* the recurrence of a layer is one autograd node (`ClippedLstmRecurrence`) with an explicit backward loop, so a
  training step records one node per layer instead of a dozen per time step, and every weight gradient is one large
  matrix product over all steps;
* on a GPU (or any non-CPU device) both directions advance together, one ``bmm`` per step; with Triton (CUDA
  builds) each step is one ``torch.compile``'d function, falling back to the plain step where compiling fails;
* on the CPU, models of some size (`RecurrencePlan.PER_DIRECTION_FROM`) run one direction at a time, each on its own
  thread, their per-step products on weights packed for oneDNN (or MKL): `PackedCpuKernels`. Those operators are
  internal to torch: the package checks that they exist (`available`) before using them.

Conventions: recurrence tensors are direction-major and time-major, ``(D, T, B, width)``. ``valid`` is ``(T, B, 1)``
1. or 0. in the compute dtype; a step past a row's length keeps the state and outputs zeros (as in the loop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from transformers.utils import logging

from .cpu_kernels import CpuKernels, PackedCpuKernels, available
from .lstm_steps import (
    _cell,
    _fresh,
    _output,
    _tanh,
    _with_fallback,
    compile_failure,
    compiled_steps,
    compiler_available,
    stacked_backward_step,
    stacked_forward_step,
)

logger = logging.get_logger(__name__)


class LstmWeights(NamedTuple):
    """One direction's tensors of a layer: input product ``weight_ih`` (4H, P) and ``bias`` (4H), recurrent
    ``weight_hh`` (4H, P), projection ``weight_hr`` (P, H); gate order (i, f, g, o)."""

    weight_ih: torch.Tensor
    bias: torch.Tensor
    weight_hh: torch.Tensor
    weight_hr: torch.Tensor


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype inference keeps the state, cell and gate sums in: float32 at least (half precision runs only the
    products), the rule of the shipped form."""
    return torch.promote_types(dtype, torch.float32)


def steps_per_input_product(rows: int, gates: int) -> int:
    """How many steps' input products (``rows`` x ``gates`` each) inference computes at once: about 2**22 numbers,
    at least one step (the rule of the shipped form, so that memory does not grow with the sentences' length)."""
    return max(1, 2**22 // max(1, rows * gates))


# ---------------------------------------------------------------------------------------------------------------
# The recurrence: forward and backward loops
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecurrencePlan:
    """How `clipped_lstm` runs: ``per_direction`` (CPU: one direction at a time, products in the CPU kernels' form) or
    all directions stacked (``bmm``); ``parallel`` (the directions on their own threads, one core each);
    ``compiled`` (the stacked steps through ``torch.compile`` with ``backend``)."""

    per_direction: bool = False
    parallel: bool = False
    compiled: bool = False
    backend: str | Callable = "inductor"
    kernels: CpuKernels = field(default_factory=CpuKernels)

    #: Recurrent matrices (4H x P) from this many entries on run per direction on the CPU: below it, the Python work
    #: of a step outweighs what per-direction products and threads save (elmo-tiny: 2,048; elmo-27m: 1,048,576).
    PER_DIRECTION_FROM = 65536

    @classmethod
    def for_device(
        cls, device: torch.device, directions: int, recurrent_size: int = PER_DIRECTION_FROM
    ) -> RecurrencePlan:
        """The plan for ``directions`` directions whose recurrent matrices have ``recurrent_size`` entries."""
        if device.type == "cpu":
            kernels = default_cpu_kernels()
            if recurrent_size < cls.PER_DIRECTION_FROM or not kernels.per_direction:
                return cls()
            return cls(
                per_direction=True,
                parallel=directions > 1 and kernels.concurrent and torch.get_num_threads() > 1,
                kernels=kernels,
            )
        return cls(compiled=compiler_available(device))


def _direction_forward_step(weight_hh, weight_hr, rows: int, kernels: CpuKernels):
    """The forward step of one direction (D = 1), its products in the CPU kernels' form (`CpuKernels.step_linear`)."""
    recurrent, project = kernels.step_linear(weight_hh[0], rows), kernels.step_linear(weight_hr[0], rows)
    dtype = weight_hh.dtype

    def step(gates_x, h, c, valid, cell_clip, proj_clip):
        gates = (gates_x[0] + recurrent(h[0].to(dtype))).unsqueeze(0)
        acts, cell, c_next, m = _cell(gates, c, valid, cell_clip)
        projected = project(m[0].to(dtype)).unsqueeze(0).to(h.dtype)
        h_next, y = _output(projected, h, valid, proj_clip)
        return acts, cell, projected, h_next, c_next, y

    return step


def _step_indices(plan: RecurrencePlan, steps: int, device: torch.device) -> list:
    """What the stacked steps get as ``t``: ints, or for compiled steps one-element index tensors made on the device
    (fills: no copy from the host, which would wait for the device)."""
    if not plan.compiled:
        return list(range(steps))
    return [torch.full((1,), t, dtype=torch.long, device=device) for t in range(steps)]


def _stacked_steps(plan: RecurrencePlan) -> tuple[Callable, Callable]:
    """(forward step, backward step) for stacked directions: compiled where planned and not failed before."""
    if not plan.compiled:
        return stacked_forward_step, stacked_backward_step
    steps = compiled_steps(plan.backend)
    return _with_fallback(steps, "forward", stacked_forward_step), _with_fallback(
        steps, "backward", stacked_backward_step
    )


def _forward_loop(gates_x, valid, h0, c0, weight_hh, weight_hr, clips, plan: RecurrencePlan, save: bool):
    """Run the recurrence over T steps for the D directions of ``gates_x`` (D, T, B, 4H).

    Returns y (D, T, B, P), the final (h, c), and, when ``save``, what the backward needs: activations (D, T, B, 4H),
    unclipped cells (D, T, B, H), unclipped projections (D, T, B, P), carried states h (D, T + 1, B, P) and
    c (D, T + 1, B, H) (index t: the state step t starts from).
    """
    cell_clip, proj_clip = clips
    if plan.per_direction:
        step = _direction_forward_step(weight_hh, weight_hr, gates_x.shape[2], plan.kernels)
        call = lambda t, h, c: step(gates_x[:, t], h, c, valid[t], cell_clip, proj_clip)  # noqa: E731
    else:
        forward_step, index = _stacked_steps(plan)[0], _step_indices(plan, gates_x.shape[1], gates_x.device)
        gates_x, valid, h0, c0 = _fresh(gates_x), _fresh(valid), _fresh(h0), _fresh(c0)
        call = lambda t, h, c: forward_step(gates_x, index[t], h, c, valid, weight_hh, weight_hr, cell_clip, proj_clip)  # noqa: E731
    h, c = h0, c0
    outputs, hs, cs, acts, cells, projections = [], [h0], [c0], [], [], []
    for t in range(gates_x.shape[1]):
        act, cell, projected, h, c, y = call(t, h, c)
        outputs.append(y)
        if save:
            acts.append(act)
            cells.append(cell)
            projections.append(projected)
            hs.append(h)
            cs.append(c)
    y = torch.stack(outputs, dim=1)
    if not save:
        return y, (h, c), None
    return y, (h, c), tuple(torch.stack(parts, dim=1) for parts in (acts, cells, projections, hs, cs))


def _step_factors(acts, cells, cs, valid, clips):
    """What every backward step of the uncompiled forms multiplies by, computed for all steps at once (a few large
    operations instead of a few dozen small ones per step): the gate factors (D, T, B, 4H) (``d gates`` = factors x
    [grad cell x 3; grad m]), ``d m / d cell`` (D, T, B, H), the cell clip's mask (or `None`), ``1 - valid`` and
    ``tanh(clipped cell)`` (also the projection inputs' factor)."""
    cell_clip = clips[0]
    i, f, g, o = acts.chunk(4, dim=-1)
    clipped = cells.clamp(-cell_clip, cell_clip) if cell_clip is not None else cells
    tanh_c = _tanh(clipped)
    factors = torch.empty_like(acts)  # each quarter written in its place: no concatenation of four copies
    quarters = factors.chunk(4, dim=-1)
    torch.mul(g * i, 1 - i, out=quarters[0])
    torch.mul(cs[:, :-1] * f, 1 - f, out=quarters[1])
    torch.mul(i, 1 - g * g, out=quarters[2])
    torch.mul(tanh_c * o, 1 - o, out=quarters[3])
    cell_mask = (cells.abs() <= cell_clip).to(cells.dtype) if cell_clip is not None else None  # inclusive, as clamp
    return factors, o * (1 - tanh_c * tanh_c), cell_mask, 1 - valid, tanh_c


def _factored_backward_loop(grad_y, grad_h, grad_c, valid, saved, clips, project_back, recur_back, out=None):
    """The backward loop of the uncompiled forms on `_step_factors`: per step the two products (``project_back``:
    grad projection -> grad m; ``recur_back``: (grad gates, grad h kept) -> grad h) and about a dozen element-wise
    operations; the numbers of `stacked_backward_step` (to rounding). Returns the gate and projection gradients
    (D, T, B, *) (the gate gradients written to ``out`` when given), the initial state's gradients and
    ``tanh(clipped cell)``."""
    acts, cells, projections, _, cs = saved
    steps, proj_clip = acts.shape[1], clips[1]
    factors, dm_dcell, cell_mask, invalid, tanh_c = _step_factors(acts, cells, cs, valid, clips)
    proj_mask = (projections.abs() <= proj_clip).to(projections.dtype) if proj_clip is not None else None
    H = cells.shape[-1]
    forget = acts[..., H : 2 * H]
    # each step's gradients written into their place in the results (no per-step concatenation, no stack at the end)
    grad_gates = torch.empty_like(factors) if out is None else out
    grad_projections = torch.empty_like(projections)
    cell_gates = (grad_gates[..., : 3 * H].unflatten(-1, (3, H)), factors[..., : 3 * H].unflatten(-1, (3, H)))
    for t in reversed(range(steps)):
        grad_projected = torch.add(grad_y[:, t], grad_h, out=grad_projections[:, t]).mul_(valid[t])
        if proj_mask is not None:
            grad_projected.mul_(proj_mask[:, t])
        grad_m = project_back(grad_projected)
        grad_cell = torch.addcmul(grad_c * valid[t], grad_m, dm_dcell[:, t])
        if cell_mask is not None:
            grad_cell.mul_(cell_mask[:, t])
        torch.mul(grad_cell.unsqueeze(-2), cell_gates[1][:, t], out=cell_gates[0][:, t])  # i, f, g: grad cell
        torch.mul(grad_m, factors[:, t, :, 3 * H :], out=grad_gates[:, t, :, 3 * H :])  # o: grad m
        grad_c = torch.addcmul(grad_c * invalid[t], grad_cell, forget[:, t])
        grad_h = recur_back(grad_gates[:, t], grad_h * invalid[t])
    return grad_gates, grad_projections, grad_h, grad_c, tanh_c


def _backward_loop(grad_y, grad_h, grad_c, valid, saved, weight_hh, weight_hr, clips, plan: RecurrencePlan, out=None):
    """The backward of `_forward_loop`: -> gradients of gates_x (D, T, B, 4H) (written to ``out`` when given, on the
    uncompiled forms), h0, c0, weight_hh, weight_hr."""
    acts, cells, projections, hs, cs = saved
    steps, rows = acts.shape[1:3]
    cell_clip, proj_clip = clips
    if plan.compiled:  # the compiled stacked step (a GPU), on the saved tensors whole
        backward_step, index = _stacked_steps(plan)[1], _step_indices(plan, steps, acts.device)
        grad_y, grad_h, grad_c, valid = _fresh(grad_y), _fresh(grad_h), _fresh(grad_c), _fresh(valid)
        grad_gates, grad_projections = [None] * steps, [None] * steps
        for t in reversed(range(steps)):
            grad_gates[t], grad_projections[t], grad_h, grad_c = backward_step(
                grad_y, index[t], grad_h, grad_c, valid, acts, cells, projections, cs, weight_hh, weight_hr, *clips
            )
        grad_gates, grad_projections = torch.stack(grad_gates, 1), torch.stack(grad_projections, 1)
        tanh_c = _tanh(cells.clamp(-cell_clip, cell_clip) if cell_clip is not None else cells)
    else:
        if plan.per_direction:  # D = 1: the transposed products in the CPU kernels' form
            project = plan.kernels.step_linear(weight_hr[0].t().contiguous(), rows)  # grad_projected @ W_hr
            recurrent = plan.kernels.step_linear(weight_hh[0].t().contiguous(), rows)  # grad_gates @ W_hh

            def project_back(x):
                return project(x[0]).unsqueeze(0)

            def recur_back(x, kept):
                return recurrent(x[0]).add_(kept[0]).unsqueeze(0)

        else:

            def project_back(x):
                return torch.bmm(x, weight_hr)

            def recur_back(x, kept):
                return torch.baddbmm(kept, x, weight_hh)

        grad_gates, grad_projections, grad_h, grad_c, tanh_c = _factored_backward_loop(
            grad_y, grad_h, grad_c, valid, saved, clips, project_back, recur_back, out
        )
    # (D, T, B, 4H): also the gradient of the input products; the weights' gradients, one product over all steps
    directions = acts.shape[0]
    m = acts[..., 3 * tanh_c.shape[-1] :] * tanh_c  # the projection inputs of every step, recomputed at once
    flat = lambda x: x.reshape(directions, steps * rows, x.shape[-1])  # noqa: E731
    grad_weight_hh = torch.bmm(flat(grad_gates).transpose(1, 2), flat(hs[:, :steps]))  # (D, 4H, P)
    grad_weight_hr = torch.bmm(flat(grad_projections).transpose(1, 2), flat(m))  # (D, P, H)
    return grad_gates, grad_h, grad_c, grad_weight_hh, grad_weight_hr


def _each_direction(run: Callable[[int], object], count: int, plan: RecurrencePlan) -> list:
    """``[run(d) for d in range(count)]``, at the same time where planned (the CPU kernels' `CpuKernels.map`)."""
    return plan.kernels.map(run, count) if plan.parallel else [run(d) for d in range(count)]


def _run_forward(gates_x, valid, h0, c0, weight_hh, weight_hr, clips, plan: RecurrencePlan, save: bool):
    """`_forward_loop` over all directions: stacked, or one direction at a time (on threads when planned).
    Returns y, (h, c) and the saved tensors as a flat list (per direction when ``per_direction``)."""
    if not plan.per_direction:
        y, final, saved = _forward_loop(gates_x, valid, h0, c0, weight_hh, weight_hr, clips, plan, save)
        return y, final, list(saved or ())
    one = lambda x, d: x[d : d + 1]  # noqa: E731
    parts = _each_direction(
        lambda d: _forward_loop(
            one(gates_x, d), valid, one(h0, d), one(c0, d), one(weight_hh, d), one(weight_hr, d), clips, plan, save
        ),
        gates_x.shape[0],
        plan,
    )
    y = torch.cat([part[0] for part in parts])
    final = (torch.cat([part[1][0] for part in parts]), torch.cat([part[1][1] for part in parts]))
    return y, final, [tensor for part in parts for tensor in (part[2] or ())]


def _direction_inference(inputs, valid, h0, c0, weights, dtype, clips, plan: RecurrencePlan):
    """CPU inference: each direction's input products and recurrence on its own thread (when planned), on the
    layers' own weights (no stacked copies), the input products a block of steps at a time
    (`steps_per_input_product`)."""

    def run(d: int):
        own = weights[d]
        steps, rows, width = inputs[d].shape
        weight_ih, bias = own.weight_ih.to(dtype), own.bias.to(dtype)
        input_products = plan.kernels.dense_linear(weight_ih, bias)
        step = _direction_forward_step(
            own.weight_hh.to(dtype).unsqueeze(0), own.weight_hr.to(dtype).unsqueeze(0), rows, plan.kernels
        )
        gates = weight_ih.shape[0]  # 4H
        h, c, outputs = h0[d : d + 1], c0[d : d + 1], []
        block = steps_per_input_product(rows, gates)
        for start in range(0, steps, block):
            gates_x = input_products(inputs[d, start : start + block].reshape(-1, width)).view(-1, 1, rows, gates)
            for t, step_gates in enumerate(gates_x.to(h.dtype), start):
                *_, h, c, y = step(step_gates, h, c, valid[t], *clips)
                outputs.append(y)
        return torch.stack(outputs, dim=1), (h, c)

    parts = _each_direction(run, inputs.shape[0], plan)
    return torch.cat([part[0] for part in parts]), (
        torch.cat([part[1][0] for part in parts]),
        torch.cat([part[1][1] for part in parts]),
    )


class ClippedLstmRecurrence(torch.autograd.Function):
    """The recurrence of `clipped_lstm` as one autograd node: forward `_forward_loop`, backward `_backward_loop`.

    Inputs: gates_x (D, T, B, 4H) (input products and bias), valid (T, B, 1) 1. or 0., h0 (D, B, P), c0 (D, B, H),
    weight_hh (D, 4H, P), weight_hr (D, P, H), clips (cell, projection), plan. Outputs: y (D, T, B, P), h, c.
    """

    @staticmethod
    def forward(ctx, gates_x, valid, h0, c0, weight_hh, weight_hr, clips, plan):
        # detached: the steps see plain tensors (compiled steps would otherwise also key on requires_grad)
        gates_x, h0, c0, weight_hh, weight_hr = (t.detach() for t in (gates_x, h0, c0, weight_hh, weight_hr))
        y, (h, c), saved = _run_forward(gates_x, valid, h0, c0, weight_hh, weight_hr, clips, plan, save=True)
        ctx.save_for_backward(valid, weight_hh, weight_hr, *saved)
        ctx.clips, ctx.plan = clips, plan
        return y, h.clone(), c.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_h, grad_c):
        valid, weight_hh, weight_hr, *saved = ctx.saved_tensors
        plan, clips = ctx.plan, ctx.clips
        directions, (steps, rows), (P, H) = weight_hh.shape[0], saved[0].shape[1:3], weight_hr.shape[1:]
        like = saved[0]
        grad_y = grad_y if grad_y is not None else like.new_zeros(directions, steps, rows, P)
        grad_h = grad_h if grad_h is not None else like.new_zeros(directions, rows, P)
        grad_c = grad_c if grad_c is not None else like.new_zeros(directions, rows, H)
        if not plan.per_direction:
            grads = _backward_loop(grad_y, grad_h, grad_c, valid, saved, weight_hh, weight_hr, clips, plan)
        else:
            one = lambda x, d: x[d : d + 1]  # noqa: E731
            grad_gates = like.new_empty(directions, *like.shape[1:])  # each direction's written in place, not joined
            parts = _each_direction(
                lambda d: _backward_loop(
                    one(grad_y, d),
                    one(grad_h, d),
                    one(grad_c, d),
                    valid,
                    saved[5 * d : 5 * d + 5],
                    one(weight_hh, d),
                    one(weight_hr, d),
                    clips,
                    plan,
                    out=one(grad_gates, d),
                ),
                directions,
                plan,
            )
            grads = [grad_gates, *(torch.cat(tensors) for tensors in list(zip(*parts, strict=False))[1:])]
        grad_gates, grad_h0, grad_c0, grad_weight_hh, grad_weight_hr = grads
        return grad_gates, None, grad_h0, grad_c0, grad_weight_hh, grad_weight_hr, None, None


def clipped_lstm(
    inputs: torch.Tensor,
    valid: torch.Tensor,
    weights: Sequence[LstmWeights],
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    cell_clip: float | None,
    proj_clip: float | None,
    plan: RecurrencePlan | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One layer of the LSTM with a clipped projection, for ``len(weights)`` directions at once.

    Args:
        inputs: (D, T, B, P), time-major, one direction per entry of ``weights`` (each reads its own sequence).
        valid: (T, B) bool, True on each row's valid prefix.
        weights: D `LstmWeights` (tuples of the four tensors), one per direction.
        state: (h (D, B, P), c (D, B, H)) to start from, zeros when `None`.
        cell_clip, proj_clip: the clips of the cell and the projection (`None`: off).
        plan: how to run (tests force one); default `RecurrencePlan.for_device`.

    Returns y (D, T, B, P) (zeros past each row's length) and the final (h, c), carried over padded steps. Under
    autocast the products run in the autocast dtype, as the loop's do; in inference, as in the shipped form, the
    state, cell and gate sums stay in float32 (`state_dtype`), in training they run in that dtype.
    """
    weights = [LstmWeights(*own) for own in weights]
    directions, steps, rows, _ = inputs.shape
    device = inputs.device
    dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else inputs.dtype
    P, H = weights[0].weight_hr.shape
    needs_grad = torch.is_grad_enabled() and (
        inputs.requires_grad
        or any(s.requires_grad for s in state or ())
        or any(tensor.requires_grad for own in weights for tensor in own)
    )
    # inference keeps state, cell and gate sums in float32 (the products in ``dtype``); training runs in ``dtype``
    carried = dtype if needs_grad else state_dtype(dtype)
    if state is None:
        h0, c0 = (
            inputs.new_zeros(directions, rows, P, dtype=carried),
            inputs.new_zeros(directions, rows, H, dtype=carried),
        )
    else:
        h0, c0 = state[0].to(carried), state[1].to(carried)
    if steps == 0:
        return inputs.new_zeros(directions, 0, rows, P, dtype=dtype), (h0, c0)
    clips = (cell_clip, proj_clip)
    plan = plan or RecurrencePlan.for_device(device, directions, weights[0].weight_hh.numel())
    with torch.autocast(device.type, enabled=False):
        if plan.per_direction and not needs_grad:
            y, final = _direction_inference(
                inputs.to(dtype), valid.unsqueeze(-1).to(carried), h0, c0, weights, dtype, clips, plan
            )
            return y.to(dtype), final
        stack = lambda tensors: torch.stack(list(tensors)).to(dtype)  # noqa: E731
        weight_ih, bias, weight_hh, weight_hr = (stack(tensors) for tensors in zip(*weights, strict=True))
        # the input products of every step and direction in one batched product (bias included)
        gates_x = torch.baddbmm(
            bias.unsqueeze(1), inputs.to(dtype).reshape(directions, steps * rows, -1), weight_ih.transpose(1, 2)
        ).view(directions, steps, rows, 4 * H)
        valid = valid.unsqueeze(-1).to(carried)  # (T, B, 1) 0./1.
        if needs_grad:
            y, h, c = ClippedLstmRecurrence.apply(gates_x, valid, h0, c0, weight_hh, weight_hr, clips, plan)
            return y, (h, c)
        y, final, _ = _run_forward(gates_x.to(carried), valid, h0, c0, weight_hh, weight_hr, clips, plan, save=False)
        return y.to(dtype), final


def default_cpu_kernels() -> CpuKernels:
    """`PackedCpuKernels` where this torch build has the packed products (`available`), else the public form."""
    return PackedCpuKernels() if available() else CpuKernels()


def _warn_once_on_compile_failure(inputs: torch.Tensor) -> None:
    if inputs.device.type != "cpu" and compile_failure():
        logger.warning_once(
            f"torch.compile could not build the LSTM step ({compile_failure()}); running it uncompiled."
        )


def packed_lstm(inputs, valid, weights, state=None, *, cell_clip, proj_clip):
    """The entry the shipped model file calls: `clipped_lstm` with the default plan (inputs (D, T, B, P), valid
    (T, B), one `LstmWeights` per direction, state or `None`, the two clips) -> y (D, T, B, P), final (h, c)."""
    result = clipped_lstm(inputs, valid, weights, state, cell_clip=cell_clip, proj_clip=proj_clip)
    _warn_once_on_compile_failure(inputs)
    return result


__all__ = [
    "ClippedLstmRecurrence",
    "RecurrencePlan",
    "available",
    "clipped_lstm",
    "compile_failure",
    "default_cpu_kernels",
    "LstmWeights",
    "packed_lstm",
    "state_dtype",
    "steps_per_input_product",
]
