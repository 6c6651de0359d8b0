"""``elmo evaluate``: command-line entry point of the evaluation suite.

    elmo evaluate MODEL --task perplexity --text heldout.txt --unigram-fit train.txt
    elmo evaluate MODEL --task wsd-probe probe-sentiment probe-pos --compare-untrained
    python scripts/evaluate.py MODEL --task all --text heldout.txt --data-dir DATA --max-train-examples 2000

MODEL is a model folder (``save_pretrained`` output: config, safetensors weights and, for perplexity, the
tokenizer's vocab.txt) or a Hub id. The probes read SST-2 (``nyu-mll/glue``) and UD English EWT from the Hub unless
``--data-dir`` names a local copy. Results go to ``MODEL/evaluation`` (or ``--output-dir``): ``eval_results.json``
(docs/results.md), ``eval_results.md`` and PNG plots. Bad input ends the command with one line on stderr.

This module is the command: its options, the inputs read and checked before any model is loaded, and the files
written. The tasks run in `modeling_elmo.evaluation.runner`; the output folder's earlier results are checked and
merged in `modeling_elmo.evaluation.merge`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

import torch

from ..folders.manifest import read_manifest, write_manifest
from ..folders.run_folder import EvaluationFolder
from ..utils.io_utils import atomic_write_text
from ..utils.results import EvaluationResults, write_results
from . import data as ev_data
from .merge import COMMAND, RecordedWrites, check_own_outputs, merge_task_results, own_manifest, previous_results
from .report import markdown_report, score_records, write_plots
from .runner import (
    describe_path,
    load_model_and_tokenizer,
    load_probe_data,
    paired_comparisons,
    probe_details,
    resolve_model,
    run_tasks,
    untrained_models,
)
from .wsd import DEFAULT_WSD_SET

logger = logging.getLogger("modeling_elmo.evaluation")

TASKS = ("perplexity", "wsd-probe", "probe-sentiment", "probe-pos")


def build_parser(prog: str = "elmo evaluate") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Evaluate an ELMo model: perplexity, word-sense "
        "nearest-neighbour probe, linear probes (sentiment, POS) on frozen features.",
    )
    p.add_argument("model", help="model folder (save_pretrained output) or Hub id")
    p.add_argument(
        "--task",
        nargs="+",
        default=["all"],
        choices=[*TASKS, "all"],
        metavar="TASK",
        help=f"one or more of {', '.join(TASKS)} or 'all' (default)",
    )
    p.add_argument("--output-dir", type=Path, default=None, help="where results go (default: MODEL/evaluation)")
    p.add_argument(
        "--compare-untrained",
        action="store_true",
        help="also evaluate a randomly initialised model of the same shape (torch.manual_seed(--seed))",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the untrained model and of probe training (default 0)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass (default 32)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    g = p.add_argument_group("perplexity")
    g.add_argument("--text", type=Path, help="held-out text, one sentence per line, whitespace tokens")
    g.add_argument("--max-sentences", type=int, default=None, help="use the first N sentences of --text")
    g.add_argument(
        "--unigram-fit",
        type=Path,
        nargs="+",
        default=None,
        metavar="FILE",
        help="text file(s), one sentence per line, to fit the unigram baseline on (use the training text; "
        "default: the evaluation text itself, an optimistic oracle)",
    )
    g.add_argument("--unigram-smoothing", type=float, default=1.0, help="add-k smoothing of the unigram (default 1)")
    g = p.add_argument_group("wsd-probe")
    g.add_argument(
        "--wsd-file",
        type=Path,
        default=DEFAULT_WSD_SET,
        help="sense-labelled JSONL (default: the shipped Senseval hard/interest/line/serve sample)",
    )
    g.add_argument("--tie-tolerance", type=float, default=1e-6, help="cosines within this of the best are ties")
    g = p.add_argument_group("probes")
    g.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="local folder with the probe data (sentiment-sst2/, pos-ud-ewt/, pos-ptb-sample/; see "
        "docs/evaluation.md); default: SST-2 (nyu-mll/glue) and UD English EWT from the Hub",
    )
    g.add_argument(
        "--pos-dataset",
        choices=["ud-ewt", "ptb-sample"],
        default="ud-ewt",
        help="ud-ewt: UPOS, official train/dev; ptb-sample: PTB tags, 80/20 split by file (--data-dir only)",
    )
    g.add_argument("--max-train-examples", type=int, default=20000, help="training sentences per probe (default 20000)")
    g.add_argument("--max-dev-examples", type=int, default=None, help="dev sentences per probe (default: all)")
    g.add_argument("--probe-epochs", type=float, default=3.0, help="training epochs of each probe (default 3)")
    g.add_argument(
        "--probe-min-steps",
        type=int,
        default=300,
        help="raise the epochs of a small training set to reach this many updates (default 300)",
    )
    g.add_argument("--probe-lr", type=float, default=1e-2, help="AdamW learning rate, decayed linearly (default 1e-2)")
    g.add_argument("--probe-batch-size", type=int, default=32)
    g.add_argument("--no-layer-norm", action="store_true", help="do not normalise layers before mixing")
    g.add_argument(
        "--no-standardize",
        action="store_true",
        help="do not standardise each feature dimension with the training split's mean and std",
    )
    return p


def _check_numbers(args) -> None:
    for name in ("batch_size", "probe_batch_size", "max_train_examples", "max_sentences", "max_dev_examples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def evaluate(args) -> EvaluationResults:
    """Run the requested evaluation and write the result files; returns what was written."""
    tasks = list(TASKS) if "all" in args.task else list(dict.fromkeys(args.task))
    _check_numbers(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, run = resolve_model(args.model)
    if args.output_dir is not None:
        out = EvaluationFolder(args.output_dir)
    elif run is not None:
        out = run.evaluation
    else:
        raise ValueError(f"model {args.model!r} is a Hub id: pass --output-dir for the results")
    model_name = Path(model).name if run is not None else model
    previous = previous_results(out, model_name)  # checked before any work: a file that cannot be merged stops here
    check_own_outputs(out, previous)
    writes = RecordedWrites(out)
    data_dir = Path(args.data_dir) if args.data_dir is not None else None
    if data_dir is not None and not data_dir.is_dir():
        raise ValueError(f"--data-dir {str(data_dir)!r} is not a folder")

    # Read and validate every input before loading the model, so bad input fails fast.
    inputs: dict[str, Any] = {}
    datasets: dict[str, str] = {}
    if "perplexity" in tasks:
        if args.text is None:
            raise ValueError("the perplexity task needs --text (held-out text, one sentence per line)")
        inputs["text"] = ev_data.read_text_sentences(args.text, args.max_sentences)
        if args.unigram_fit is not None:
            fit = [s for path in args.unigram_fit for s in ev_data.read_text_sentences(path)]
            inputs["unigram_fit"] = (fit, ", ".join(describe_path(p, data_dir) for p in args.unigram_fit))
        else:
            inputs["unigram_fit"] = (inputs["text"], "evaluation text (oracle)")
        datasets["perplexity"] = describe_path(args.text, data_dir)
    if "wsd-probe" in tasks:
        inputs["wsd"] = ev_data.read_wsd_jsonl(args.wsd_file)
        datasets["wsd-probe"] = describe_path(args.wsd_file, data_dir)
    for task in ("probe-sentiment", "probe-pos"):
        if task in tasks:
            *split, desc = load_probe_data(task, args, data_dir)
            inputs[task] = split
            datasets[task] = desc

    lm, base, tokenizer, config = load_model_and_tokenizer(model, device, need_lm="perplexity" in tasks)
    num_parameters = sum(p.numel() for p in base.parameters())
    logger.info("evaluating %s: %s", args.model, ", ".join(tasks))
    trained, timings = run_tasks(tasks, args, lm, base, tokenizer, config, inputs, datasets)
    untrained, comparison, untrained_timings = {}, {}, {}
    if args.compare_untrained:
        del lm, base
        logger.info("untrained comparison: a model of the same shape after torch.manual_seed(%d)", args.seed)
        ulm, ubase = untrained_models(config, args.seed, device, need_lm="perplexity" in tasks)
        untrained, untrained_timings = run_tasks(tasks, args, ulm, ubase, tokenizer, config, inputs, datasets)
        comparison = paired_comparisons(trained, untrained)
    perplexity = []
    if "perplexity" in trained:
        record = trained["perplexity"]
        if "perplexity" in untrained:
            record = dataclasses.replace(record, untrained_average=untrained["perplexity"].average)
        perplexity.append(record)
    settings = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("model", "output_dir", "text", "wsd_file", "unigram_fit", "data_dir")
    }
    results = EvaluationResults.now(
        model=model_name,
        source="elmo evaluate",
        perplexity=perplexity,
        scores=score_records(trained, datasets, untrained, comparison),
        untrained_seed=args.seed if args.compare_untrained else None,
        details={
            "settings": settings,
            "datasets": datasets,
            "model_config": {
                k: getattr(config, k)
                for k in (
                    "vocab_size",
                    "projection_dim",
                    "hidden_size",
                    "cell_size",
                    "num_hidden_layers",
                    "char_cnn_filters",
                    "num_highway_layers",
                )
            },
            "parameters": num_parameters,
            "tasks": probe_details(trained),
            "untrained_tasks": probe_details(untrained),
            "timings_seconds": timings,
            "untrained_timings_seconds": untrained_timings,
        },
    )
    results = merge_task_results(previous, results, tasks)
    writes.remove_left_temporaries()
    results.details["plots"] = write_plots(results, out, run, before_replace=writes.before_replace)
    write_results(out.results_file, results, before_replace=writes.before_replace)
    atomic_write_text(out.report_file, markdown_report(results), before_replace=writes.before_replace)
    recorded = (read_manifest(out.root) or {}).get("files", []) if own_manifest(out) else []
    written = [path.name for path in (out.results_file, out.report_file, *out.plot_files())]
    write_manifest(out.root, COMMAND, [*recorded, *written])
    logger.info("wrote %s", out.results_file)
    return results


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``elmo evaluate`` / ``scripts/evaluate.py``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        results = evaluate(args)
    except (ValueError, OSError) as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    print(markdown_report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
