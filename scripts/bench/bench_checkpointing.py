#!/usr/bin/env python
"""Memory and time of one biLM training step (forward and backward) with and without gradient checkpointing, on the
CPU. Prints one JSON object.

    OMP_NUM_THREADS=1 python scripts/bench/bench_checkpointing.py --preset elmo-cpu --batch 8 --words 400

Each setting runs in a fresh process (peak RSS is a process-wide high-water mark): it builds the model and a batch of
``--batch`` sentences of ``--words`` random words each (random character ids, right-padded to 50), records the peak
RSS, takes one training step (exact softmax loss over a ``--vocab`` word vocabulary, LSTM dropout as configured) and
records the peak RSS again. ``step_peak_mib`` is the difference: what the step itself needed at its peak.
``kept_for_backward_mib`` is what autograd holds between the forward and the backward pass: the distinct storages of
the tensors saved for the backward pass (parameters left out), counted by a `saved_tensors_hooks` around the forward
(inside a checkpointed unit, the checkpoint's own hooks take over: what it recomputes is not counted). ``--form
package`` gives the model the installed package's recurrence (``config.use_packed_kernels``, what ``elmo
pretrain`` runs), ``shipped`` the files shipped with a model.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def one_step(preset: str, batch: int, words: int, vocab: int, checkpointing: bool, form: str) -> dict:
    sys.path.insert(0, str(REPO))  # run from a checkout without installing
    import torch

    from modeling_elmo import ElmoConfig, ElmoForBidirectionalLM

    torch.manual_seed(0)
    config = ElmoConfig.from_json_file(str(REPO / "configuration" / f"{preset}.json"))
    config.vocab_size, config.lm_softmax = vocab, "full"
    config.use_packed_kernels = form == "package"
    model = ElmoForBidirectionalLM(config).train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    ids = torch.randint(7, 200, (batch, words, 50))
    ids[..., 0], ids[..., 12:] = 259, 261  # begin-of-word, a word of up to 11 characters, padding
    ids[..., 11] = 260
    labels = torch.randint(4, vocab, (batch, words))
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "step_peak_mib": (after - before) / 1024,
        "kept_for_backward_mib": sum(kept.values()) / 2**20,
        "seconds": seconds,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="elmo-cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--words", type=int, default=400)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--form", choices=["package", "shipped"], default="package")
    parser.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)  # a child process's setting
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_step(args.preset, args.batch, args.words, args.vocab, args.one == "on", args.form)))
        return 0
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_forward import cpu_name

    report = {
        "preset": args.preset,
        "batch": args.batch,
        "words": args.words,
        "form": args.form,
        "torch": torch.__version__,
        "cpu": cpu_name(),
    }
    for setting in ("off", "on"):
        command = [
            sys.executable,
            __file__,
            "--one",
            setting,
            "--preset",
            args.preset,
            "--batch",
            str(args.batch),
            "--words",
            str(args.words),
            "--vocab",
            str(args.vocab),
            "--form",
            args.form,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        report[f"checkpointing_{setting}"] = json.loads(done.stdout.strip().splitlines()[-1])
    for key in ("step_peak_mib", "kept_for_backward_mib"):
        report[f"{key}_saved"] = 1 - report["checkpointing_on"][key] / report["checkpointing_off"][key]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
