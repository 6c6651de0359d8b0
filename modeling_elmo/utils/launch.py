"""One check of how a command was launched, shared by ``elmo pretrain`` and ``elmo embed``.

`accelerate launch` and torchrun tell each process the number of processes started (``WORLD_SIZE``); accelerate
then sets up its own state. The two can disagree: on a machine without GPUs, ``accelerate launch --multi_gpu
--num_processes 2`` without ``ACCELERATE_USE_CPU=1`` gives two independent single-process runs that write the same
files. `use_cpu_backend` says when the gloo CPU backend must be asked for, and `check_process_count` refuses a state
whose process count differs from the launch's.
"""

from __future__ import annotations

import os

__all__ = ["LaunchError", "check_process_count", "launched_processes", "use_cpu_backend"]


class LaunchError(ValueError):
    """accelerate set up a different number of processes than were launched."""


def launched_processes() -> int:
    """The number of processes the launcher started (``WORLD_SIZE``; 1 for a plain ``python`` run)."""
    value = os.environ.get("WORLD_SIZE", "1")
    try:
        count = int(value)
    except ValueError:
        raise LaunchError(f"WORLD_SIZE must be a positive integer, got {value!r}.") from None
    if count < 1:
        raise LaunchError(f"WORLD_SIZE must be a positive integer, got {value!r}.")
    return count


def use_cpu_backend() -> bool:
    """Whether accelerate must be told to run on the CPU (gloo): ``ACCELERATE_USE_CPU`` is set, or several processes
    were launched on a machine where torch sees no GPU."""
    from accelerate.utils import parse_flag_from_env

    if parse_flag_from_env("ACCELERATE_USE_CPU"):
        return True
    if launched_processes() > 1:
        import torch

        return not torch.cuda.is_available()
    return False


def check_process_count(num_processes: int, distributed_type: object = "") -> None:
    """Raise `LaunchError` when accelerate's ``num_processes`` differs from the number launched."""
    launched = launched_processes()
    if num_processes != launched:
        kind = getattr(distributed_type, "value", distributed_type)
        raise LaunchError(
            f"launched as {launched} processes but accelerate set up {num_processes}"
            f"{f' ({kind})' if kind else ''}; on a machine without GPUs launch with ACCELERATE_USE_CPU=1 "
            "accelerate launch --multi_gpu --num_processes N (`--cpu --num_processes N` starts one process)."
        )
