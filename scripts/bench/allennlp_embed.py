"""The loop of AllenNLP's old ``allennlp elmo`` command (removed in AllenNLP 1.0) on its own biLM
(``allennlp.modules.elmo._ElmoBiLm``, unmodified), for ``bench_embed.py``'s ``allennlp`` baseline:

    PYTHON_WITH_ALLENNLP scripts/bench/allennlp_embed.py INPUT.txt OUTPUT.h5 --options O --weights W [--batch-size 64]

As the command did with ``--all``: the lines split on whitespace, in file order, ``--batch-size`` at a time, through
``batch_to_ids`` and the stateful biLM (its LSTM states carried from batch to batch), the boundaries removed, and each
line's ``(3, tokens, 2P)`` float32 layers written to the HDF5 file as it comes, under ``str(line_index)``, then
``sentence_to_index``. Prints one JSON object: lines, tokens, the loop's seconds, peak RSS (MB) and versions.
Imports torch, numpy, h5py and allennlp only (it runs in the allennlp environment, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from pathlib import Path

import h5py
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allennlp_forward import load_bilm  # noqa: E402
from forward_timing import rss_mb  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--options", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    bilm = load_bilm(args.options, args.weights)
    from allennlp.modules.elmo import batch_to_ids
    from allennlp.nn.util import remove_sentence_boundaries

    start = time.perf_counter()
    with open(args.input, encoding="utf-8") as handle:
        sentences = [line.strip() for line in handle]
    if any(not s for s in sentences):
        parser.error("the old command refused blank lines; give a file without them")
    words = [s.split() for s in sentences]
    sentence_to_index, tokens = {}, 0
    with h5py.File(args.output, "w") as out:
        for first in range(0, len(words), args.batch_size):
            batch = words[first : first + args.batch_size]
            output = bilm(batch_to_ids(batch))
            trimmed = [remove_sentence_boundaries(layer, output["mask"]) for layer in output["activations"]]
            layers, mask = torch.cat([t[0].unsqueeze(1) for t in trimmed], dim=1), trimmed[0][1]
            for i in range(len(batch)):
                length = int(mask[i].sum())
                out.create_dataset(str(first + i), dtype="float32", data=layers[i, :, :length].detach().numpy())
                sentence_to_index[sentences[first + i]] = str(first + i)
                tokens += length
        index = out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
        index[0] = json.dumps(sentence_to_index)
    seconds = time.perf_counter() - start
    versions = {"torch": torch.__version__, "allennlp": importlib.metadata.version("allennlp")}
    result = {"lines": len(words), "tokens": tokens, "seconds": round(seconds, 3), "peak_rss_mb": rss_mb("VmHWM")}
    print(json.dumps({**result, "threads": torch.get_num_threads(), **versions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
