"""Timing and memory of one forward form in its own process, shared by ``bench_forward.py`` and the interpreters it
starts (``allennlp_forward.py`` runs in another virtual environment): it imports only torch and the standard library.
"""

from __future__ import annotations

import resource
import time
from typing import Callable

import torch

#: The square fp32 matmul each process times in turns with its forward: the same-run peak of the fractions.
MATMUL_SIZE = 2048


def best_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def timed_in_turns(runs: dict, repeats: int, samples: dict[str, int] | None = None) -> dict[str, float]:
    """Best-of seconds of every callable of ``runs``, timed in turns (one warm-up each first): ``repeats`` rounds,
    in each ``samples.get(name, 1)`` timings of ``name`` (short runs such as the matmul get more chances to meet a
    quiet moment of a shared machine)."""
    for fn in runs.values():
        fn()
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            for _ in range((samples or {}).get(name, 1)):
                start = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (``VmRSS``) or its peak so far (``VmHWM``), MB (Linux)."""
    with open("/proc/self/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_forward(forward: Callable[[], object], flops: float, tokens: int, repeats: int, extra=None) -> dict:
    """Time ``forward`` (``flops`` FLOPs, ``tokens`` words) in turns with a square fp32 matmul and the callables of
    ``extra`` (their best seconds under ``seconds_of``), under `torch.inference_mode`; the figures every form reports,
    and the process's peak RSS after the calls."""
    a, b = torch.randn(MATMUL_SIZE, MATMUL_SIZE), torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    with torch.inference_mode():
        runs = {"forward": forward, "matmul": lambda: a @ b, **(extra or {})}
        seconds = timed_in_turns(runs, repeats, samples={"matmul": 5, **{name: 3 for name in extra or {}}})
    peak = 2 * MATMUL_SIZE**3 / seconds["matmul"]
    return {
        "seconds": seconds["forward"],
        "tokens_per_s": tokens / seconds["forward"],
        "gflops": flops / seconds["forward"] / 1e9,
        "fraction_of_matmul_peak": flops / seconds["forward"] / peak,
        "matmul_peak_gflops": peak / 1e9,
        "peak_rss_mb": rss_mb("VmHWM"),
        **({"seconds_of": {name: seconds[name] for name in extra}} if extra else {}),
    }
