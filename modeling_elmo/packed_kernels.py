"""The fast CPU form of the biLM's recurrence: per-step products on weights packed for oneDNN (or MKL), and the two
directions on two threads. Part of the installed package only, never shipped to the Hub with a model.

The file shipped with a model (`lstm_kernels.py`) computes every product with public torch operators
(`lstm_kernels.CpuKernels`). This module implements the same interface with torch's packed-weight operators
(``torch.ops.mkldnn._linear_pointwise`` on weights reordered once per call, ``torch.ops.mkl._mkl_linear`` where
oneDNN is missing), which run the small per-step products of a recurrence markedly faster on x86 CPUs, and runs the
two directions of a layer at the same time, one intra-op thread each. Those operators are internal to torch: they
may change between releases, so the package checks that they exist before using them (`available`) and every form
is tested equal to the public one.

Importing the package installs this form for the package's own classes (`install`, when `available`); a model
loaded as remote code (``trust_remote_code=True``) runs its own copy of `lstm_kernels.py`: `install` takes that model
to give it this form too. ``use_cpu_kernels(None)`` of either module goes back to the public form.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.nn import functional as F

from . import lstm_kernels
from .lstm_kernels import CpuKernels, Linear, StepProducts, plain_linear

__all__ = ["PackedCpuKernels", "available", "install", "mkl_packing_available", "onednn_packing_available", "on_threads"]


def mkl_packing_available() -> bool:
    """Whether this torch build has MKL's packed-weight GEMM (x86 CPU builds)."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


def onednn_packing_available() -> bool:
    """Whether this torch build and CPU have oneDNN's prepacked linear (x86 CPUs with AVX2 or AVX-512)."""
    return (torch.backends.mkldnn.is_available() and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def available() -> bool:
    """Whether the packed products run here (an x86 build of torch with oneDNN or MKL)."""
    return onednn_packing_available() or mkl_packing_available()


def on_threads(run: Callable[[int], object], count: int) -> list:
    """``[run(i) for i in range(count)]`` on one thread per item, each with one intra-op thread.

    For independent pieces of CPU work (the two directions; shares of a batch of words): two cores each running one
    single-threaded piece beat both cores splitting every small product, and a neighbour's load on one core then
    slows one piece instead of every product. Workers run in the caller's grad mode; the caller's thread count is
    restored afterwards (torch's setting of MKL is per process).
    """
    if count < 2:
        return [run(i) for i in range(count)]
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()

    def work(i: int):
        torch.set_num_threads(1)
        with torch.set_grad_enabled(grad):
            return run(i)

    try:
        with ThreadPoolExecutor(max_workers=count, thread_name_prefix="elmo") as pool:
            return list(pool.map(work, range(count)))
    finally:
        torch.set_num_threads(threads)


class PackedCpuKernels(CpuKernels):
    """`lstm_kernels.CpuKernels` on packed weights (fp32 on the CPU; other dtypes get the public products) and
    threads."""

    name = "packed"
    concurrent = True

    def step_linear(self, weight: torch.Tensor, rows: int) -> Linear:
        """``x -> x @ weight.T`` on a copy of ``weight`` packed for ``rows`` rows, oneDNN first (x86: its kernels for
        few rows are faster than MKL's, on AMD CPUs by far), else MKL's small-batch GEMM. The copy is made for this
        call only: in-place weight updates are always seen. Packing costs one pass over the matrix; T products on it
        then save T - 1."""
        if weight.device.type != "cpu" or weight.dtype != torch.float32:
            return plain_linear(weight)
        weight = weight.detach().contiguous()
        if onednn_packing_available():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
            return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        if mkl_packing_available():
            packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
            return lambda x: torch.ops.mkl._mkl_linear(x, packed, weight, None, rows)
        return plain_linear(weight)

    def dense_linear(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
        """oneDNN's kernel on the unpacked weight where it applies (fp32 on an x86 CPU; faster than MKL's on AMD
        CPUs), else ``F.linear``: for T * B rows packing costs more than it saves."""
        if weight.device.type == "cpu" and weight.dtype == torch.float32 and onednn_packing_available():
            weight, bias = weight.detach(), None if bias is None else bias.detach()
            return lambda x: torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        return lambda x: F.linear(x, weight, bias)

    def loop_products(self, weight_hh: torch.Tensor, weight_hr: torch.Tensor, batch: int) -> StepProducts | None:
        """MKL-packed copies of the loop's recurrent and projection weights for ``batch`` rows (inference)."""
        if not mkl_packing_available():
            return None
        hh, hr = weight_hh.detach(), weight_hr.detach()
        packed_hh = torch.ops.mkl._mkl_reorder_linear_weight(hh, batch)
        packed_hr = torch.ops.mkl._mkl_reorder_linear_weight(hr, batch)
        linear = torch.ops.mkl._mkl_linear
        return (lambda h, gates_x: linear(h, packed_hh, hh, None, batch).add_(gates_x)), \
            (lambda u: linear(u, packed_hr, hr, None, batch))

    def map(self, run: Callable[[int], object], count: int) -> list:
        """The pieces on threads (`on_threads`) when torch has two or more intra-op threads, else one by one."""
        if torch.get_num_threads() > 1:
            return on_threads(run, count)
        return [run(i) for i in range(count)]


def install(model: torch.nn.Module | None = None) -> bool:
    """Use the packed form in the package's classes, and, given ``model``, in the copy of ``lstm_kernels.py`` that
    ``model``'s class runs (a model loaded with ``trust_remote_code=True``). Returns whether the form is available
    here (where it is not, nothing changes)."""
    if not available():
        return False
    modules = [lstm_kernels]
    if model is not None:
        package = sys.modules[type(model).__module__].__package__
        shipped = sys.modules.get(f"{package}.lstm_kernels") if package else None
        if shipped is None or not hasattr(shipped, "use_cpu_kernels"):
            raise ValueError(f"{type(model).__name__} does not run an ELMo lstm_kernels.py beside its module "
                             f"{type(model).__module__}; nothing to install the packed form into.")
        modules.append(shipped)
    for module in modules:
        module.use_cpu_kernels(PackedCpuKernels())
    return True
