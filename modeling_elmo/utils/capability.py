"""What the hardware can compute fast: the one place the package's tools ask before choosing bfloat16."""

from __future__ import annotations

from pathlib import Path

import torch

#: CPU flags (as Linux names them in /proc/cpuinfo) that mean bfloat16 matrix products run natively: x86 AVX512-BF16
#: or AMX-BF16, Arm's BF16 extension.
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where the file is absent or unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


def bf16_supported(device: torch.device | str = "cpu") -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (so bfloat16 runs faster than float32 there).

    CUDA: `torch.cuda.is_bf16_supported`. CPU: the CPU's flags name AVX512-BF16, AMX-BF16 or Arm's BF16 (elsewhere
    bfloat16 products are emulated in float32 and slower). Other devices: False.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(BF16_CPU_FLAGS & _cpu_flags())
    return False


def require_bf16(device: torch.device | str, what: str) -> None:
    """Raise one-line `ValueError` naming ``what`` where ``device`` lacks native bfloat16 (`bf16_supported`)."""
    if not bf16_supported(device):
        raise ValueError(
            f"{what}: bfloat16 needs a device that multiplies bfloat16 natively (a CPU with AVX512-BF16, AMX or Arm "
            f"BF16, or a GPU); {torch.device(device)} here does not: use float32."
        )
