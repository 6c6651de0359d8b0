"""AllenNLP's own biLM (``allennlp.modules.elmo._ElmoBiLm``, unmodified) on an original release, timed like every form
of ``bench_forward.py`` (its ``--forms allennlp`` starts this file in an interpreter that has allennlp):

    PYTHON_WITH_ALLENNLP scripts/bench/allennlp_forward.py --options O --weights W --ids IDS.npy --flops F \\
        --threads 2 --repeats 3 [--activations OUT.npz]

``IDS.npy``: (batch, tokens, 50) character ids of full-length sentences, without the boundaries (AllenNLP adds them).
Prints one JSON object (`forward_timing.time_forward`'s figures and ``rss_model_mb``); ``--activations`` writes the
layers of the first call (fresh state) without the boundary positions, ``layers`` (L+1, batch, tokens, 2P) float32.
Imports torch, numpy and allennlp only: allennlp 2.10 pins torch < 1.13, so it lives in a virtual environment of its
own (docs/benchmarks.md: how to make one). Its package imports ``torchvision`` for images only; where torchvision is
not installed (PyPI's wheels need a CUDA build of torch) an empty module stands in for it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forward_timing import rss_mb, time_forward  # noqa: E402


def load_bilm(options: str, weights: str) -> torch.nn.Module:
    """``_ElmoBiLm`` of the release, or exit with one line when allennlp cannot be imported."""
    try:
        import torchvision  # noqa: F401
    except ModuleNotFoundError:
        sys.modules["torchvision"] = types.ModuleType("torchvision")
    try:
        from allennlp.modules.elmo import _ElmoBiLm
    except ImportError as error:
        raise SystemExit(f"allennlp_forward: error: {sys.executable} cannot import allennlp.modules.elmo: {error}")
    return _ElmoBiLm(options, weights, requires_grad=False).eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--ids", required=True)
    parser.add_argument("--flops", type=float, required=True, help="the forward's FLOPs (bench_forward's count)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--activations")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    bilm = load_bilm(args.options, args.weights)
    rss_model = rss_mb()
    ids = torch.from_numpy(np.load(args.ids, allow_pickle=False))
    if not (ids > 0).any(-1).all():
        parser.error("--ids: every sentence must be full length (the layers are compared position by position)")
    with torch.inference_mode():
        layers = bilm(ids)["activations"]
        if args.activations:
            np.savez(args.activations, layers=torch.stack(layers)[:, :, 1:-1].float().numpy())
        del layers
    result = time_forward(lambda: bilm(ids), args.flops, ids.shape[0] * ids.shape[1], args.repeats)
    versions = {"torch": torch.__version__, "allennlp": importlib.metadata.version("allennlp")}
    print(json.dumps({**result, "rss_model_mb": rss_model, **versions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
