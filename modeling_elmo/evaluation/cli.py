"""``elmo evaluate``: command-line entry point of the evaluation suite.

    elmo evaluate MODEL --task perplexity --text heldout.txt --unigram-fit train.txt
    elmo evaluate MODEL --task wsd-probe probe-sentiment probe-pos --compare-untrained
    python scripts/evaluate.py MODEL --task all --text heldout.txt --data-dir DATA --max-train-examples 2000

MODEL is a model folder (``save_pretrained`` output: config, safetensors weights and, for perplexity, the
tokenizer's vocab.txt) or a Hub id. The probes read SST-2 (``nyu-mll/glue``) and UD English EWT from the Hub unless
``--data-dir`` names a local copy. Results go to ``MODEL/evaluation`` (or ``--output-dir``): ``eval_results.json``
(docs/results.md), ``eval_results.md`` and PNG plots. Bad input ends the command with one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..embedding.inference import (
    HEAD_WEIGHT_PREFIXES,
    check_loading_info,
    check_safetensors_files,
    check_weights_fit_config,
    load_elmo_tokenizer,
    quiet_load_report,
    refuse_nonfinite_weights,
)
from ..folders.manifest import file_record, read_manifest, write_manifest
from ..folders.run_folder import EvaluationFolder, RunFolder
from ..utils.io_utils import atomic_write_text
from ..utils.loading import check_model_location, refuse_pickled_weights
from ..utils.results import EvaluationResults, read_results, write_results
from ..utils.vocab_file import vocabulary_size_of
from . import data as ev_data
from .metrics import mcnemar_exact, most_frequent_tag_accuracy
from .report import markdown_report, score_records, write_plots
from .tasks import compute_layer_features, fit_unigram_baseline, lm_perplexity, probe_task, wsd_probe
from .wsd import DEFAULT_WSD_SET, SENSEVAL_TSV, build_wsd_subset

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


# ------------------------------------------------------------------------------------------- loading
def resolve_model(model: str) -> tuple[str, RunFolder | None]:
    """``model`` as a local ELMo model folder (with its `RunFolder`) or a Hub id (with None).

    Raises `ValueError` naming the problem: a path that does not exist, a file, a folder without ``config.json``
    (an empty folder, say), a config of another model type, no safetensors weights."""
    path = Path(model)
    if check_model_location(model):
        run = RunFolder(path)
        if path.is_dir():
            refuse_pickled_weights(path)
        run.require_elmo_model()
        return str(path), run
    return model, None


def load_model_and_tokenizer(model: str, device: torch.device, need_lm: bool):
    """Load the trained model (`ElmoForBidirectionalLM` when it has a word vocabulary, else `ElmoModel`)
    and its tokenizer from a folder or Hub id `resolve_model` accepted. Returns (lm or None, base ElmoModel,
    tokenizer, config)."""
    from modeling_elmo import ElmoForBidirectionalLM, ElmoModel, ElmoTokenizer

    from ..utils.config_checks import load_config

    check_model_location(model)
    try:
        config = load_config(model, f"the config.json of model {model!r}")
    except OSError as error:  # a Hub id that cannot be fetched
        raise ValueError(
            f"model {model!r} is not a local folder and cannot be loaded from the Hub ({str(error).splitlines()[0]})"
        ) from None
    if Path(model).is_dir():
        check_safetensors_files(model)  # a truncated or damaged file: one line, before anything is allocated
        vocab_file = RunFolder(model).vocab_file
        if need_lm and config.vocab_size > 4 and vocab_file.is_file():  # streamed, before anything is built
            _check_vocabulary_size(model, vocabulary_size_of(vocab_file), config.vocab_size)
    lm = None
    if config.vocab_size > 4:
        lm, info = _load_checked(
            ElmoForBidirectionalLM, model, config, ignore_missing=("softmax.",), ignore_unexpected=HEAD_WEIGHT_PREFIXES
        )
        if any(k.startswith("softmax.") for k in info.get("missing_keys", ())):
            lm = None  # a vocabulary in the config but no trained softmax in the weights
    if lm is not None:
        lm = lm.to(device).eval()
        base = lm.elmo
    elif need_lm:
        raise ValueError(
            f"model {model!r} has no language-model head (vocab_size={config.vocab_size}"
            f"{', no word vocabulary' if config.vocab_size <= 4 else ', no softmax weights in the checkpoint'}): "
            "the perplexity task needs a model pretrained with a word vocabulary"
        )
    else:
        base, _ = _load_checked(ElmoModel, model, config, ignore_unexpected=HEAD_WEIGHT_PREFIXES)
        base = base.to(device).eval()
    refuse_nonfinite_weights(lm if lm is not None else base, model)
    path = Path(model)
    if path.is_dir() and not RunFolder(path).has_tokenizer() and not RunFolder(path).vocab_file.exists():
        tokenizer = ElmoTokenizer()  # character ids need no files; word ids (perplexity) do
    else:  # only the perplexity maps words to ids: the probes never build the word mapping
        tokenizer = load_elmo_tokenizer(model, words=need_lm)
    if tokenizer.max_characters_per_token != config.max_characters_per_token:
        raise ValueError(
            f"the tokenizer of model {model!r} writes {tokenizer.max_characters_per_token} characters "
            f"per word but the model reads {config.max_characters_per_token} (config.json); the two files "
            "belong to different models"
        )
    if need_lm and lm is not None:
        _check_vocabulary_size(model, tokenizer.vocab_size, config.vocab_size)
    return lm, base, tokenizer, config


def _check_vocabulary_size(model: str, words: int, rows: int) -> None:
    if words != rows:
        raise ValueError(
            f"the vocabulary of model {model!r} has {words} words but its softmax has {rows} rows (config.json "
            "vocab_size): the perplexity would score other words."
        )


def _load_checked(model_class, model: str, config, **ignore):
    """``model_class.from_pretrained`` with every mismatch between the weights and ``config.json`` (missing,
    unexpected or misshaped tensors) and every unreadable file turned into one `ValueError`; returns (model, info).
    A local folder's safetensors headers are compared with the config first (no allocation)."""
    if Path(model).is_dir():
        check_weights_fit_config(model, model_class, config, **ignore)
    try:
        with quiet_load_report():
            loaded, info = model_class.from_pretrained(
                model, config=config, output_loading_info=True, use_safetensors=True, ignore_mismatched_sizes=True
            )
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load the weights of model {model!r}: {str(error).strip().splitlines()[0]}") from None
    except Exception as error:  # safetensors' SafetensorError, torch's size errors
        raise ValueError(
            f"cannot load the weights of model {model!r}: {type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        ) from None
    check_loading_info(model, info, **ignore)
    return loaded, info


def untrained_models(config, seed: int, device: torch.device, need_lm: bool):
    """A randomly initialised model of the same shape: ``torch.manual_seed(seed)`` then the classes' own
    initialisation. Returns (lm or None, base)."""
    from modeling_elmo import ElmoForBidirectionalLM, ElmoModel

    torch.manual_seed(seed)
    if need_lm or config.vocab_size > 4:
        lm = ElmoForBidirectionalLM(config).to(device).eval()
        return lm, lm.elmo
    return None, ElmoModel(config).to(device).eval()


def _describe(path: Path, data_dir: Path | None = None) -> str:
    """A path for the results file without this machine's absolute prefix."""
    path = Path(path)
    if data_dir is not None:
        try:
            return str(path.resolve().relative_to(Path(data_dir).resolve()))
        except ValueError:
            pass
    if path.resolve() == DEFAULT_WSD_SET.resolve():
        return f"modeling_elmo/evaluation/{DEFAULT_WSD_SET.name} (Senseval hard/interest/line/serve sample)"
    return "/".join(path.parts[-2:])


def load_probe_data(task: str, args, data_dir: Path | None) -> tuple[list, list, list, list, str]:
    """(train_tokens, train_labels, dev_tokens, dev_labels, description) for a probe task: from the Hub, or from
    ``data_dir`` when given."""
    ntr, ndev = args.max_train_examples, args.max_dev_examples
    if task == "probe-sentiment":
        if data_dir is None:
            train, dev = ev_data.load_sst2_from_hub("train", ntr), ev_data.load_sst2_from_hub("validation", ndev)
            desc = "nyu-mll/glue sst2 train/validation (Hub)"
        else:
            folder = data_dir / "sentiment-sst2"
            train = ev_data.read_sst2(folder / "train.tsv", ntr)
            dev = ev_data.read_sst2(folder / "dev.tsv", ndev)
            desc = "sentiment-sst2 train.tsv / dev.tsv"
        return (
            [s.tokens for s in train],
            [s.label for s in train],
            [s.tokens for s in dev],
            [s.label for s in dev],
            desc,
        )
    if args.pos_dataset == "ptb-sample":
        if data_dir is None:
            raise ValueError("--pos-dataset ptb-sample reads a local copy: pass --data-dir")
        train, dev = ev_data.split_ptb_by_file(
            ev_data.read_ptb_tagged(data_dir / "pos-ptb-sample" / "treebank_tagged.tsv")
        )
        train, dev = train[:ntr], dev[:ndev] if ndev else dev
        desc = "pos-ptb-sample treebank_tagged.tsv (PTB tags; last 20% of files as dev)"
    elif data_dir is None:
        train = ev_data.load_ud_pos_from_hub("train", max_sentences=ntr)
        dev = ev_data.load_ud_pos_from_hub("validation", max_sentences=ndev)
        desc = "universal_dependencies en_ewt UPOS train/validation (Hub)"
    else:
        folder = data_dir / "pos-ud-ewt"
        train = ev_data.read_conllu(folder / "en_ewt-ud-train.conllu", max_sentences=ntr)
        dev = ev_data.read_conllu(folder / "en_ewt-ud-dev.conllu", max_sentences=ndev)
        desc = "pos-ud-ewt en_ewt-ud-train / dev (UPOS)"
    return [s.tokens for s in train], [s.tags for s in train], [s.tokens for s in dev], [s.tags for s in dev], desc


# ------------------------------------------------------------------------------------------- running
def run_tasks(
    tasks: list[str], args, lm, base, tokenizer, config, inputs: dict, datasets: dict[str, str]
) -> tuple[dict, dict]:
    """Run the tasks on one model. Returns (per-task output, seconds per task): a `PerplexityResult` for
    perplexity, the probes' dicts otherwise."""
    from modeling_elmo import ElmoForSequenceClassification, ElmoForTokenClassification

    progress = not args.no_progress
    out: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for task in tasks:
        t0 = time.perf_counter()
        if task == "perplexity":
            baseline = inputs.get("unigram")
            if baseline is None and "unigram_fit" in inputs:
                fit, fitted_on = inputs["unigram_fit"]
                baseline = inputs["unigram"] = fit_unigram_baseline(
                    tokenizer, fit, fitted_on=fitted_on, smoothing=args.unigram_smoothing, progress=progress
                )
            r = lm_perplexity(
                lm,
                tokenizer,
                inputs["text"],
                dataset=datasets["perplexity"],
                split="held-out",
                baseline=baseline,
                batch_size=args.batch_size,
                progress=progress,
            )
        elif task == "wsd-probe":
            r = wsd_probe(base, tokenizer, inputs["wsd"], args.batch_size, args.tie_tolerance, progress=progress)
        else:
            xtr, ytr, xdev, ydev = inputs[task]
            token_level = task == "probe-pos"
            if token_level:
                tags = sorted({t for y in ytr for t in y} | {t for y in ydev for t in y})
                index = {t: i for i, t in enumerate(tags)}
                ytr_ids = [[index[t] for t in y] for y in ytr]
                ydev_ids = [[index[t] for t in y] for y in ydev]
                num_labels = len(tags)
            else:
                ytr_ids, ydev_ids, num_labels, tags = list(ytr), list(ydev), 2, ["negative", "positive"]
            ftr = compute_layer_features(
                base, tokenizer, xtr, args.batch_size, progress=progress, desc=f"features {task} train"
            )
            fdev = compute_layer_features(
                base, tokenizer, xdev, args.batch_size, progress=progress, desc=f"features {task} dev"
            )
            head_class = ElmoForTokenClassification if token_level else ElmoForSequenceClassification
            r = probe_task(
                ftr,
                ytr_ids,
                fdev,
                ydev_ids,
                config,
                head_class,
                num_labels,
                token_level,
                layer_norm=not args.no_layer_norm,
                standardize=not args.no_standardize,
                progress=progress,
                desc=f"training {task}",
                epochs=args.probe_epochs,
                learning_rate=args.probe_lr,
                batch_size=args.probe_batch_size,
                seed=args.seed,
                min_steps=args.probe_min_steps,
            )
            r["labels"] = tags
            if token_level:
                r["most_frequent_tag_baseline"] = most_frequent_tag_accuracy(xtr, ytr, xdev, ydev)
            del ftr, fdev
        timings[task] = time.perf_counter() - t0
        out[task] = r
        logger.info("%s done in %.1f s", task, timings[task])
    return out, timings


def paired_comparisons(trained: dict, untrained: dict) -> dict:
    """Per probe task and representation: the trained model against the untrained one on the same dev examples
    (or tokens), with McNemar's exact test. Consumes the per-example ``_correct`` arrays of both."""
    out: dict[str, dict] = {}
    for task in ("probe-sentiment", "probe-pos"):
        if task not in trained or task not in untrained:
            continue
        out[task] = {}
        for layer, r in trained[task]["layers"].items():
            u = untrained[task]["layers"].get(layer)
            if u is not None and "_correct" in r and "_correct" in u:
                test = mcnemar_exact(r["_correct"], u["_correct"])
                out[task][layer] = {
                    "examples": test["examples"],
                    "trained_only_correct": test["a_only"],
                    "untrained_only_correct": test["b_only"],
                    "difference": test["difference"],
                    "mcnemar_p_value": test["p_value"],
                }
    return out


def _probe_details(tasks: dict) -> dict:
    """The probes' outputs without the perplexity record and the per-example ``_correct`` arrays."""
    out = {}
    for task, r in tasks.items():
        if task == "perplexity":
            continue
        r = dict(r)
        if "layers" in r:
            r["layers"] = {k: {n: v for n, v in layer.items() if n != "_correct"} for k, layer in r["layers"].items()}
        out[task] = r
    return out


def _check_numbers(args) -> None:
    for name in ("batch_size", "probe_batch_size", "max_train_examples", "max_sentences", "max_dev_examples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


COMMAND = "elmo evaluate"


def _own_manifest(out: EvaluationFolder) -> bool:
    manifest = read_manifest(out.root)
    return manifest is not None and manifest["command"] == COMMAND


def check_own_outputs(out: EvaluationFolder, previous: EvaluationResults | None) -> None:
    """Raise `ValueError` naming the file if one that ``elmo evaluate`` would replace in ``out`` (the report, a plot)
    was not written by it, as it wrote it: recorded in the folder's manifest with its size and sha256 (by name only
    in a manifest of an earlier version), or (a folder of an earlier version, without one) beside a results file
    that elmo evaluate wrote."""
    recorded = (read_manifest(out.root) or {}).get("files", {}) if _own_manifest(out) else {}
    legacy = not _own_manifest(out) and previous is not None and previous.source == COMMAND
    for path in (out.report_file, *(out.root / name for name in EvaluationFolder.PLOTS.values())):
        if not os.path.lexists(path) or legacy:
            continue
        if path.name not in recorded:
            raise ValueError(
                f"{path} was not written by elmo evaluate, which would replace it; move it away or "
                "choose another --output-dir."
            )
        if recorded[path.name] is not None and file_record(path) != recorded[path.name]:
            raise ValueError(
                f"{path} differs from what elmo evaluate wrote (changed since), and elmo evaluate would "
                "replace it; move it away or choose another --output-dir."
            )


def previous_results(out: EvaluationFolder, model_name: str) -> EvaluationResults | None:
    """The results already in ``out`` (None when there are none), which the new ones are merged into; raises
    `ValueError` for a file that cannot be read or holds another model's results (it is never replaced)."""
    if not os.path.lexists(out.results_file):
        return None
    if out.results_file.is_symlink() or not out.results_file.is_file():
        raise ValueError(
            f"{out.results_file} is not a regular file; elmo evaluate never replaces one. Choose another --output-dir."
        )
    try:
        previous = read_results(out.results_file)
    except ValueError as error:
        raise ValueError(
            f"the results already in {out.results_file} cannot be read, so the new ones cannot be "
            f"merged into them ({error}); move the file away or choose another --output-dir."
        ) from None
    if previous.model != model_name:
        raise ValueError(
            f"{out.results_file} holds the results of model {previous.model!r}, not {model_name!r}; choose "
            "another --output-dir."
        )
    return previous


#: The per-task entries of ``details`` (task name -> value), merged task by task.
_PER_TASK_DETAILS = ("datasets", "tasks", "untrained_tasks", "timings_seconds", "untrained_timings_seconds")


def merge_task_results(
    previous: EvaluationResults | None, new: EvaluationResults, tasks: list[str]
) -> EvaluationResults:
    """``new`` (the results of ``tasks``) with the records of the other tasks kept from ``previous``: evaluating one
    task never removes another task's results. The per-task details are merged the same way; the rest of
    ``details`` (settings, model) is the new run's."""
    if previous is None:
        return new
    perplexity = ([] if "perplexity" in tasks else list(previous.perplexity)) + list(new.perplexity)
    scores = [s for s in previous.scores if s.task not in tasks] + list(new.scores)
    details = {**previous.details, **new.details}
    for key in _PER_TASK_DETAILS:
        old = previous.details.get(key)
        if isinstance(old, dict):
            details[key] = {**{t: v for t, v in old.items() if t not in tasks}, **(new.details.get(key) or {})}
    seed = new.untrained_seed if new.untrained_seed is not None else previous.untrained_seed
    return dataclasses.replace(new, perplexity=perplexity, scores=scores, details=details, untrained_seed=seed)


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
            inputs["unigram_fit"] = (fit, ", ".join(_describe(p, data_dir) for p in args.unigram_fit))
        else:
            inputs["unigram_fit"] = (inputs["text"], "evaluation text (oracle)")
        datasets["perplexity"] = _describe(args.text, data_dir)
    if "wsd-probe" in tasks:
        inputs["wsd"] = ev_data.read_wsd_jsonl(args.wsd_file)
        datasets["wsd-probe"] = _describe(args.wsd_file, data_dir)
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
            "tasks": _probe_details(trained),
            "untrained_tasks": _probe_details(untrained),
            "timings_seconds": timings,
            "untrained_timings_seconds": untrained_timings,
        },
    )
    results = merge_task_results(previous, results, tasks)
    results.details["plots"] = write_plots(results, out, run)
    write_results(out.results_file, results)
    atomic_write_text(out.report_file, markdown_report(results))
    recorded = (read_manifest(out.root) or {}).get("files", []) if _own_manifest(out) else []
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


def build_wsd_main(argv: list[str] | None = None) -> int:
    """Entry point of ``scripts/build_wsd_set.py``."""
    p = argparse.ArgumentParser(
        prog="build_wsd_set.py",
        description="Build the small balanced sense-labelled JSONL from the Senseval line/hard/serve/interest corpus.",
    )
    p.add_argument(
        "--data-dir", type=Path, required=True, help=f"data folder holding {SENSEVAL_TSV} (e.g. the shared data folder)"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_WSD_SET)
    p.add_argument("--senses-per-word", type=int, default=3)
    p.add_argument("--per-sense", type=int, default=30)
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    tsv = args.data_dir / SENSEVAL_TSV
    if not tsv.exists():
        p.exit(2, f"{p.prog}: error: source corpus {tsv} not found (check --data-dir)\n")
    try:
        summary = build_wsd_subset(tsv, args.out, args.senses_per_word, args.per_sense, args.max_tokens, args.seed)
    except ValueError as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
