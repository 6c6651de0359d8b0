"""The recurrence's per-step matrix product (``rows`` x P by P x 4H, ``elmo-original``: P 512, 4H 16,384) in every form
torch offers on the CPU, best of ``--repeats``, ms per direction: the public operators a ``trust_remote_code=True``
model may use, against the packed oneDNN product of the package's form (torch-internal operators)::

    OMP_NUM_THREADS=1 python scripts/bench/bench_step_products.py --threads 1 --rows 32,8

Forms: ``linear`` (``F.linear``, what the public form's ``bmm`` over a transposed weight amounts to), ``bmm_both``
(both directions in one ``bmm``, per direction), ``mm_weight_left`` (``W @ h.T``: the weight as the streamed
operand), ``to_mkldnn`` (``torch.utils.mkldnn.to_mkldnn`` of an ``nn.Linear``: the weight in oneDNN's layout),
``compiled_freezing_option`` (``torch.compile(linear, options={"freezing": True})`` under ``no_grad``), and the
torch-internal ``onednn_packed`` / ``mkl_packed`` (weights packed once for ``rows`` rows). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.utils.mkldnn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forward_timing import best_time  # noqa: E402


def step_products(rows: int, inputs: int, outputs: int, repeats: int) -> dict[str, float]:
    weight, x = torch.randn(2, outputs, inputs), torch.randn(2, rows, inputs)
    linear = torch.nn.Linear(inputs, outputs, bias=False)
    linear.weight.data = weight[0].clone()
    linear.requires_grad_(False)
    forms = {
        "linear": lambda: F.linear(x[0], weight[0]),
        "bmm_both": lambda: torch.bmm(x, weight.transpose(1, 2)),
        "mm_weight_left": lambda: torch.mm(weight[0], x[0].t()),
        "to_mkldnn": torch.utils.mkldnn.to_mkldnn(torch.nn.Sequential(linear))[0],
        "compiled_freezing_option": torch.compile(linear, options={"freezing": True}),
    }
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        packed = torch.ops.mkldnn._reorder_linear_weight(weight[0], rows)
        forms["onednn_packed"] = lambda: torch.ops.mkldnn._linear_pointwise(x[0], packed, None, "none", [], "")
    if torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"):
        mkl = torch.ops.mkl._mkl_reorder_linear_weight(weight[0], rows)
        forms["mkl_packed"] = lambda: torch.ops.mkl._mkl_linear(x[0], mkl, weight[0], None, rows)
    ms = {}
    with torch.no_grad():
        for name, form in forms.items():
            call = (lambda f=form: f(x[0])) if isinstance(form, torch.nn.Module) else form
            ms[name] = best_time(call, repeats) * 1000 / (2 if name == "bmm_both" else 1)
    return ms


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", default="32,8", help="comma-separated batch sizes")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = {"torch": torch.__version__, "threads": args.threads, "ms_per_direction": {}}
    for rows in map(int, args.rows.split(",")):
        report["ms_per_direction"][rows] = step_products(rows, 512, 16384, args.repeats)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
