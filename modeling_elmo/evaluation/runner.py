"""Running ``elmo evaluate``'s tasks on one model: the model and its tokenizer loaded and checked (or an untrained
model of the same shape), the probes' data read, each task run (`run_tasks`), and the trained model compared with
the untrained one on the same examples (`paired_comparisons`). The command itself is `modeling_elmo.evaluation.cli`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from ..embedding.inference import HEAD_WEIGHT_PREFIXES, load_elmo_tokenizer, quiet_load_report
from ..folders.run_folder import RunFolder
from ..utils.loading import check_model_location, refuse_pickled_weights
from ..utils.vocab_file import vocabulary_size_of
from ..utils.weight_checks import (
    check_loading_info,
    check_safetensors_files,
    check_weights_fit_config,
    refuse_nonfinite_weights,
)
from . import data as ev_data
from .metrics import mcnemar_exact, most_frequent_tag_accuracy
from .tasks import compute_layer_features, fit_unigram_baseline, lm_perplexity, probe_task, wsd_probe
from .wsd import DEFAULT_WSD_SET

logger = logging.getLogger("modeling_elmo.evaluation")


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


def describe_path(path: Path, data_dir: Path | None = None) -> str:
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


def probe_details(tasks: dict) -> dict:
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
