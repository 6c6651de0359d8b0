"""The CPU recurrence's matrix products and its way of spreading independent work (`CpuKernels`, the public torch
form; `PackedCpuKernels`, on weights packed for oneDNN or MKL and on threads), with the checks that this torch build
has the packed operators (`available`). Used by `packed_kernels`' plans and loops."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.nn import functional as F

Linear = Callable[[torch.Tensor], torch.Tensor]


def plain_linear(weight: torch.Tensor) -> Linear:
    """``x -> x @ weight.T`` on an (in, out) copy of ``weight`` made once: small per-step products run faster on
    the CPU untransposed."""
    weight_t = weight.detach().t().contiguous()
    return lambda x: torch.mm(x, weight_t)


class CpuKernels:
    """The CPU recurrence's matrix products and its way of running independent pieces of work, in public torch APIs.

    This form: ``torch.mm`` on transposed copies for the per-step products, ``F.linear`` for the products over all
    steps, the pieces one after another on the caller's thread. `PackedCpuKernels` is the faster one; every form
    computes the same numbers.
    """

    #: A short name for reports and benchmarks.
    name = "public"
    #: Whether `map` runs its pieces at the same time (the plans then run the two directions side by side).
    concurrent = False
    #: Whether large models run one direction at a time (`RecurrencePlan.PER_DIRECTION_FROM`). In public operators
    #: the two directions stacked are faster: one batched product (``bmm``) per step spreads both directions over
    #: the intra-op threads, where two separate products would each be split.
    per_direction = False

    def step_linear(self, weight: torch.Tensor, rows: int) -> Linear:
        """``x -> x @ weight.T`` for ``x`` of ``rows`` rows, called once per time step on the same weight."""
        return plain_linear(weight)

    def dense_linear(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
        """``x -> x @ weight.T (+ bias)`` for many rows (the input products of all steps)."""
        return lambda x: F.linear(x, weight, bias)

    def map(self, run: Callable[[int], object], count: int) -> list:
        """``[run(i) for i in range(count)]``."""
        return [run(i) for i in range(count)]


def mkl_packing_available() -> bool:
    """Whether this torch build has MKL's packed-weight GEMM (x86 CPU builds)."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


def onednn_packing_available() -> bool:
    """Whether this torch build and CPU have oneDNN's prepacked linear (x86 CPUs with AVX2 or AVX-512)."""
    return (
        torch.backends.mkldnn.is_available()
        and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


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

    try:  # the first piece on the calling thread: one thread (and one allocator arena) fewer
        with ThreadPoolExecutor(max_workers=count - 1, thread_name_prefix="elmo") as pool:
            others = pool.map(work, range(1, count))
            return [work(0), *others]
    finally:
        torch.set_num_threads(threads)


class PackedCpuKernels(CpuKernels):
    """`CpuKernels` on packed weights (fp32 on the CPU; other dtypes get the public products) and
    threads."""

    name = "packed"
    concurrent = True
    per_direction = True

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

    def map(self, run: Callable[[int], object], count: int) -> list:
        """The pieces on threads (`on_threads`) when torch has two or more intra-op threads, else one by one."""
        if torch.get_num_threads() > 1:
            return on_threads(run, count)
        return [run(i) for i in range(count)]


__all__ = [
    "CpuKernels",
    "PackedCpuKernels",
    "available",
    "mkl_packing_available",
    "on_threads",
    "onednn_packing_available",
    "plain_linear",
]
