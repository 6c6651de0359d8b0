"""Optional fast forms of the biLM's recurrence, beside the plain loop of `modeling_elmo.ElmoLstmLayer`.

Every function here computes exactly what the reference loop computes, with the same parameters; the model uses
one only where it applies (device, dtype, autograd) and falls back to the loop otherwise. Each is tested equal to
the loop. This file is shipped to the Hub with the model code: it imports only torch.

* `mkl_packed_products`: on an x86 CPU without autograd, the loop's two per-step matrix products with the recurrent
  weights packed once per call for MKL's small-batch GEMM (``cblas_sgemm_pack``): a product of a few rows with a
  matrix of up to 32 MB then no longer re-packs that matrix at every time step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

StepProducts = tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]


def mkl_packing_available() -> bool:
    """Whether this torch build has MKL's packed-weight GEMM (x86 CPU builds)."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


def mkl_packed_products(weight_hh: torch.Tensor, weight_hr: torch.Tensor, batch: int) -> StepProducts | None:
    """``(recurrent, project)`` with ``recurrent(h, gates_x) = gates_x + h @ weight_hh.T`` and
    ``project(u) = u @ weight_hr.T`` for ``batch`` rows, on MKL-packed copies of the weights; `None` where packing
    does not apply (no MKL, not fp32 on the CPU, autograd on).

    The copies are made for this call only (nothing is cached), so in-place weight updates are always seen. Packing
    costs one pass over each matrix; a sequence of T steps then saves T - 1 of them.
    """
    usable = (
        mkl_packing_available() and not torch.is_grad_enabled()
        and weight_hh.device.type == "cpu" and weight_hh.dtype == torch.float32 and weight_hr.dtype == torch.float32
    )
    if not usable:
        return None
    hh, hr = weight_hh.detach(), weight_hr.detach()
    packed_hh = torch.ops.mkl._mkl_reorder_linear_weight(hh, batch)
    packed_hr = torch.ops.mkl._mkl_reorder_linear_weight(hr, batch)
    linear = torch.ops.mkl._mkl_linear

    def recurrent(h: torch.Tensor, gates_x: torch.Tensor) -> torch.Tensor:
        return linear(h, packed_hh, hh, None, batch).add_(gates_x)

    def project(u: torch.Tensor) -> torch.Tensor:
        return linear(u, packed_hr, hr, None, batch)

    return recurrent, project


__all__ = ["StepProducts", "mkl_packed_products", "mkl_packing_available"]
