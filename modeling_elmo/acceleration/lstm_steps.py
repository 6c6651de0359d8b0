"""One time step of the recurrence: its element-wise parts (shared by every form; shapes (D, B, width), valid
(B, 1) 0./1. floats), the stacked step of D directions and its backward (`stacked_forward_step`,
`stacked_backward_step`), and those two through ``torch.compile`` with a fallback to the plain step. Used by
`packed_kernels`' loops."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


def _fast_tanh(x: torch.Tensor) -> bool:
    """Whether ``tanh(x)`` is computed as ``2 sigmoid(2x) - 1``: in fp32 on the CPU, where it is within 2e-7 of
    ``torch.tanh`` and several times faster. Not in half precision, where the subtraction loses the small values."""
    return x.dtype == torch.float32 and x.device.type == "cpu"


def _tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(2 * x).mul_(2).sub_(1) if _fast_tanh(x) else torch.tanh(x)


def _cell(gates, c, valid, cell_clip: float | None):
    """Gate pre-activations (i, f, g, o) (consumed) and the carried cell -> activations (sigmoid(i), sigmoid(f),
    tanh(g), sigmoid(o)), unclipped cell, next carried cell and ``m = o * tanh(clip(cell))``, the projection's input.
    A padded step (valid 0) keeps the carried cell: ``lerp`` with weight 0 or 1 returns one end exactly."""
    H = c.shape[-1]
    g = gates[..., 2 * H : 3 * H]
    if _fast_tanh(gates):
        g *= 2
        acts = torch.sigmoid(gates)
        acts[..., 2 * H : 3 * H].mul_(2).sub_(1)  # tanh(g) = 2 sigmoid(2g) - 1
    else:
        acts = torch.sigmoid(gates)
        acts[..., 2 * H : 3 * H] = torch.tanh(g)
    i, f, g, o = acts.chunk(4, dim=-1)
    cell = torch.addcmul(f * c, i, g)
    clipped = cell.clamp(-cell_clip, cell_clip) if cell_clip is not None else cell
    return acts, cell, torch.lerp(c, clipped, valid), o * _tanh(clipped)


def _output(projected, h, valid, proj_clip: float | None):
    """The projection (unclipped) and the carried output -> next carried output and this step's output."""
    new = projected.clamp(-proj_clip, proj_clip) if proj_clip is not None else projected
    return torch.lerp(h, new, valid), new * valid


def _output_backward(grad_y, grad_h, valid, projected, proj_clip: float | None):
    """Gradients of this step's output and of the next carried output -> gradient of the projection and the part
    of ``grad_h`` that skips a padded step."""
    grad = (grad_y + grad_h) * valid
    if proj_clip is not None:
        grad = grad * (projected.abs() <= proj_clip)  # inclusive, as clamp's gradient
    return grad, grad_h * (1 - valid)


def _cell_backward(grad_m, grad_c, valid, acts, cell, c, cell_clip: float | None):
    """Gradients of ``m`` and of the next carried cell -> gradient of the gate pre-activations and of the carried
    cell this step started from."""
    i, f, g, o = acts.chunk(4, dim=-1)
    clipped = cell.clamp(-cell_clip, cell_clip) if cell_clip is not None else cell
    tanh_c = _tanh(clipped)
    grad_cell = grad_c * valid + grad_m * o * (1 - tanh_c * tanh_c)
    if cell_clip is not None:
        grad_cell = grad_cell * (cell.abs() <= cell_clip)
    grad_gates = torch.cat(
        [
            grad_cell * g * i * (1 - i),
            grad_cell * c * f * (1 - f),
            grad_cell * i * (1 - g * g),
            grad_m * tanh_c * o * (1 - o),
        ],
        dim=-1,
    )
    return grad_gates, grad_cell * f + grad_c * (1 - valid)


def _at(x: torch.Tensor, t, dim: int) -> torch.Tensor:
    """Step ``t`` of ``x`` along ``dim``: ``t`` an int (a view), or a one-element index tensor (`index_select`)."""
    return x.select(dim, t) if isinstance(t, int) else x.index_select(dim, t).squeeze(dim)


def stacked_forward_step(gates_x, t, h, c, valid, weight_hh, weight_hr, cell_clip, proj_clip):
    """Step ``t`` of D directions at once: ``bmm`` over the stacked weights (D, 4H, P) and (D, P, H); ``gates_x``
    (D, T, B, 4H) and ``valid`` (T, B, 1) whole, indexed here. ``t`` is an int, or, compiled, a one-element index
    tensor: dynamo specialises on an int's value (one graph per step) and on the storage offset of a step's slice,
    but not on a tensor's values, so one graph serves every step. Returns (activations, unclipped cell, unclipped
    projection, next h, next c, output)."""
    valid, dtype, gates_x = _at(valid, t, 0), weight_hh.dtype, _at(gates_x, t, 1)
    if gates_x.dtype == dtype:  # one dtype (training): the sum inside the product, as precise as it gets
        gates = torch.baddbmm(gates_x, h, weight_hh.transpose(1, 2))
    else:  # float32 gate sums of bfloat16/float16 products (inference)
        gates = gates_x + torch.bmm(h.to(dtype), weight_hh.transpose(1, 2))
    acts, cell, c_next, m = _cell(gates, c, valid, cell_clip)
    projected = torch.bmm(m.to(dtype), weight_hr.transpose(1, 2)).to(h.dtype)
    h_next, y = _output(projected, h, valid, proj_clip)
    return acts, cell, projected, h_next, c_next, y


def stacked_backward_step(
    grad_y, t, grad_h, grad_c, valid, acts, cells, projections, cs, weight_hh, weight_hr, cell_clip, proj_clip
):
    """The backward of `stacked_forward_step` at step ``t`` (an int or an index tensor; the saved tensors whole,
    as ``_forward_loop`` keeps them): -> (gate gradients, projection gradient, grad h, grad c) of the state step
    ``t`` started from."""
    valid = _at(valid, t, 0)
    grad_projected, grad_h_kept = _output_backward(_at(grad_y, t, 1), grad_h, valid, _at(projections, t, 1), proj_clip)
    grad_m = torch.bmm(grad_projected, weight_hr)
    grad_gates, grad_c_prev = _cell_backward(
        grad_m, grad_c, valid, _at(acts, t, 1), _at(cells, t, 1), _at(cs, t, 1), cell_clip
    )
    return grad_gates, grad_projected, torch.baddbmm(grad_h_kept, grad_gates, weight_hh), grad_c_prev


def _fresh(x: torch.Tensor) -> torch.Tensor:
    """``x`` detached, copied when it is not a contiguous tensor at the start of its storage: compiled steps guard
    on strides and storage offsets, so that the loops' inputs look alike from call to call."""
    x = x.detach()
    return x if x.is_contiguous() and x.storage_offset() == 0 else x.clone(memory_format=torch.contiguous_format)


class _CompiledSteps:
    """`stacked_forward_step` and `stacked_backward_step` through ``torch.compile`` with one backend.

    Kept (see `compiled_steps`) because dynamo keys compiled code by the compile wrapper: a wrapper made per call
    would compile again on every call. ``failed`` records, per step function, a compilation error, after which that
    function runs uncompiled without retrying (the backward runs on autograd's device thread on a GPU: it may fail
    where the forward does not).
    """

    def __init__(self, backend: str | Callable):
        self.forward = torch.compile(stacked_forward_step, backend=backend, dynamic=True, fullgraph=True)
        self.backward = torch.compile(stacked_backward_step, backend=backend, dynamic=True, fullgraph=True)
        self.failed: dict[str, str] = {}


@functools.lru_cache(maxsize=2)
def compiled_steps(backend: str | Callable = "inductor") -> _CompiledSteps:
    """The process's compiled step functions for ``backend`` (bounded: the two most recent backends; in practice
    one, ``"inductor"``; see `_CompiledSteps`)."""
    return _CompiledSteps(backend)


def compile_failure(backend: str | Callable = "inductor") -> str | None:
    """Why compiling a step with ``backend`` failed in this process, or `None` (also when never tried)."""
    if not compiled_steps.cache_info().currsize:
        return None
    failed = compiled_steps(backend).failed
    return "; ".join(f"{name} step: {why}" for name, why in failed.items()) or None


def compiler_available(device: torch.device) -> bool:
    """Whether the steps are compiled for ``device``: on CUDA (ROCm included), whose torch builds bring the Triton
    compiler. Where compiling fails all the same, the plain steps run (`compile_failure` says why, once)."""
    return device.type == "cuda"


def _with_fallback(steps: _CompiledSteps, name: str, plain: Callable) -> Callable:
    """``steps.<name>``, or ``plain`` from the first call that fails on (compiling it, or recompiling it for new
    shapes beyond dynamo's limit); the failure is recorded once per process in ``steps.failed``, so later calls do not
    try again. Steps are pure functions: the failed step is simply computed again by ``plain``."""
    if name in steps.failed:
        return plain
    chosen = [getattr(steps, name)]

    def call(*args):
        try:
            return chosen[0](*args)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # noqa: BLE001 - any compiler failure: the plain step computes the same
            if chosen[0] is plain:
                raise
            steps.failed[name] = " ".join(f"{type(error).__name__}: {error}".split())[:300]
            chosen[0] = plain
            return plain(*args)

    return call


__all__ = [
    "compile_failure",
    "compiled_steps",
    "compiler_available",
    "stacked_backward_step",
    "stacked_forward_step",
]
