"""The run's plan: every input resolved once, before anything is written or any data are read (the data files with
their sizes and fingerprint, the vocabularies, the model configuration, the checkpoint, the output folder's use). The
run takes the plan's values: a file added afterwards is not read, a planned file that changed is refused.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..folders.run_folder import RunFolder
from .checkpoint import CheckpointManager, check_checkpoint_files, read_trainer_state
from .data import Vocabulary, check_hub_dataset, expand_text_files
from .options import PretrainingArguments, validate
from .output import check_output_folder
from .recipes import read_model_preset
from .settings import BatchSettings, DataSettings, LoopSettings, settings_from_arguments
from .state import ARCHITECTURE_KEYS, data_fingerprint

DEFAULT_MODEL_CONFIG = "elmo-tiny"
INIT_MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt")
#: Flags that override a field of the model configuration.
CONFIG_OVERRIDES = {
    "lm_softmax": "lm_softmax",
    "num_negative_samples": "num_negative_samples",
    "dropout": "hidden_dropout_prob",
}
_DATA_FLAGS = {"train": "train_file", "validation": "validation_file", "test": "test_file"}


@dataclass(frozen=True)
class Plan:
    """What `plan_run` resolved; the run uses these values, never the flags' patterns again."""

    run: RunFolder
    folder_mode: str  # `modeling_elmo.pretraining.output`'s NEW, OVERWRITE or RESUME
    model_config: dict[str, Any]  # the preset (or the starting model's config) with every override
    files: dict[str, tuple[str, ...]]  # the expanded text files of each split given as files
    stamps: dict[str, tuple[int, ...]]  # `file_stamp` of every planned file
    data_fingerprint: str  # of the training and validation data (`modeling_elmo.pretraining.state.data_fingerprint`)
    vocab: Vocabulary | None = None  # the vocabulary the run must use (None: built from the training data)
    max_vocab_size: int | None = None  # the most words a vocabulary built from the data keeps (None: all)
    characters: tuple[str, ...] | None = None  # the character vocabulary the run must use
    unicode: bool = False  # a Unicode character vocabulary (--char-vocabulary unicode, or the starting model's)
    init_from: Path | None = None  # the model whose weights the run starts from (not when resuming)
    resume_path: Path | None = None
    # the settings of the data builder, the batching and the training loop (`settings_from_arguments`)
    data: DataSettings = field(default_factory=DataSettings)
    batches: BatchSettings = field(default_factory=BatchSettings)
    loop: LoopSettings = field(default_factory=LoopSettings)

    def check_files_unchanged(self) -> None:
        """Refuse a planned file that was removed or changed since planning (the run's fingerprint names it)."""
        for split, files in self.files.items():
            for path in files:
                try:
                    stat = os.stat(path)
                except OSError:
                    raise ValueError(f"--{split}-file: {path!r} was removed after the run started.") from None
                if file_stamp(stat) != self.stamps[path]:
                    was = self.stamps[path][0]
                    how = (
                        f"size {was} -> {stat.st_size} bytes"
                        if was != stat.st_size
                        else "rewritten or replaced, with the same size"
                    )
                    raise ValueError(
                        f"--{split}-file: {path!r} changed after the run started ({how}); run the command again "
                        "once the data are complete."
                    )


def file_stamp(stat: os.stat_result) -> tuple[int, ...]:
    """What tells a planned file changed mid-run: its size and mtime, and its device, inode and ctime. A copy over
    it that keeps size and mtime (``cp -p``, ``rsync -t``, ``tar``) makes a new inode or, written in place, a new
    ctime, which no user can set back (the datasets cache is keyed by a sample of the content as well:
    `modeling_elmo.pretraining.data.content_stamp`)."""
    return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_dev, stat.st_ino)


def negative_samples(model_config: dict[str, Any]) -> int:
    from ..configuration_elmo import ElmoConfig

    default = inspect.signature(ElmoConfig.__init__).parameters["num_negative_samples"].default
    return model_config.get("num_negative_samples", default)


def build_config(model_config: dict[str, Any], vocab_size: int, characters: int | None = None):
    """The run's `ElmoConfig`, checked (``characters``: the size of a Unicode character vocabulary; None: bytes)."""
    from ..tokenization_elmo import UNICODE_FIRST_CHARACTER
    from ..utils.config_checks import config_from_dict

    if characters is not None:
        model_config = {
            **model_config,
            "char_vocabulary": "unicode",
            "num_characters": UNICODE_FIRST_CHARACTER + characters,
        }
    negatives = negative_samples(model_config)
    if model_config.get("lm_softmax") == "sampled" and isinstance(negatives, int) and negatives >= vocab_size:
        raise ValueError(
            f"--lm-softmax sampled draws {negatives} negative samples per batch, but the vocabulary has {vocab_size} "
            f"words: pass --num-negative-samples below {vocab_size}, or --lm-softmax full."
        )
    try:
        return config_from_dict({**model_config, "vocab_size": vocab_size}, "it")
    except (TypeError, ValueError) as error:
        raise ValueError(f"the model configuration is impossible: {error}") from None


def read_characters(path: Path) -> tuple[str, ...]:
    """A saved character vocabulary (``char_vocab.json``), checked as the tokenizer checks it."""
    from ..tokenization_elmo import ElmoTokenizer

    return tuple(ElmoTokenizer(char_vocab_file=str(path)).characters)


def _starting_model(folder: Path, given_config: str | None) -> tuple[dict[str, Any], Vocabulary, tuple | None]:
    """--init-from-model's config, vocabulary and character vocabulary, checked against the weights and each other."""
    from ..modeling_elmo import ElmoForBidirectionalLM
    from ..utils.config_checks import config_from_dict
    from ..utils.loading import refuse_pickled_weights
    from ..utils.vocab_file import count_vocabulary_words
    from ..utils.weight_checks import check_weights_fit_config

    name = f"--init-from-model {str(folder)!r}"
    missing = [file for file in INIT_MODEL_FILES if not (folder / file).is_file()]
    if missing:
        raise ValueError(
            f"{name} is not a saved ELMo language model folder: {', '.join(missing)} missing (a folder written by "
            "pretraining or `save_pretrained` is needed)."
        )
    refuse_pickled_weights(folder)
    config = read_model_preset(str(folder / "config.json"))
    try:
        built = config_from_dict(config, "it")
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: its config.json is impossible ({error}).") from None
    # a truncated or damaged file, or a config.json whose sizes its weights do not have: one line, before the model
    check_weights_fit_config(folder, ElmoForBidirectionalLM, built)
    words = count_vocabulary_words(folder / "vocab.txt")  # streamed: a file that does not fit is never held
    if words != config.get("vocab_size"):
        raise ValueError(
            f"{name}: its vocab.txt has {words} words but its softmax has {config.get('vocab_size')} rows "
            "(config.json vocab_size); word ids would point at other words' rows."
        )
    vocab = Vocabulary.from_file(folder / "vocab.txt")
    if given_config is not None:
        own, given = config, read_model_preset(given_config)
        bad = [k for k in ARCHITECTURE_KEYS if k in own and k in given and own[k] != given[k]]
        if bad:
            raise ValueError(
                f"--model-config {given_config!r} differs from {name} in: {', '.join(bad)} (leave --model-config out "
                "to use the model's own architecture)."
            )
    characters = read_characters(folder / "char_vocab.json") if (folder / "char_vocab.json").is_file() else None
    return config, vocab, characters


def _planned_vocab_size(model_config: dict[str, Any], vocab: Vocabulary | None, max_size: int | None) -> int:
    if vocab is not None or max_size:
        return len(vocab) if vocab is not None else max_size
    # not known before the data are counted: check everything else now, the softmax size once the vocabulary exists
    sampled = model_config.get("lm_softmax") == "sampled" and isinstance(negative_samples(model_config), int)
    return max(5, negative_samples(model_config) + 1) if sampled else 5


def _drop_code_references(model_config: dict[str, Any], args: PretrainingArguments) -> None:
    """Refuse a starting config (``--init-from-model``'s or ``--model-config``) whose ``custom_pipelines`` names code
    other than this package's pipeline (`modeling_elmo.hub.safety.custom_pipelines_problem`, the guard of ``elmo
    push``), then drop it and ``auto_map``: the new model's own classes decide them, so nothing of another folder's
    code references is carried into the user's model."""
    from ..hub.safety import custom_pipelines_problem

    problem = custom_pipelines_problem(model_config.get("custom_pipelines"), Path(__file__).resolve().parents[1])
    if problem:
        given = args.model_config is not None
        source = f"--model-config {args.model_config!r}" if given else f"--init-from-model {args.init_from_model!r}"
        raise ValueError(f"{source}: its config.json {problem}; refusing to start a model from it.")
    model_config.pop("custom_pipelines", None)
    model_config.pop("auto_map", None)


def plan_run(args: PretrainingArguments) -> Plan:
    """Check and resolve every input before any file is written or any data are read."""
    validate(args)
    fixed = characters = init_from = init_config = None  # `fixed`: (vocabulary, who fixes it)
    if args.init_from_model is not None:
        init_from = Path(args.init_from_model)
        init_config, vocab, characters = _starting_model(init_from, args.model_config)
        fixed = (vocab, f"--init-from-model {args.init_from_model!r}")
    if args.model_config is not None:
        model_config = read_model_preset(args.model_config)
    else:
        model_config = dict(init_config) if init_config is not None else read_model_preset(DEFAULT_MODEL_CONFIG)
    model_config.update(
        {key: getattr(args, name) for name, key in CONFIG_OVERRIDES.items() if getattr(args, name) is not None}
    )
    _drop_code_references(model_config, args)
    unicode = args.char_vocabulary == "unicode" or model_config.get("char_vocabulary") == "unicode"
    if init_from is not None and unicode != (characters is not None):
        raise ValueError(
            f"--char-vocabulary {args.char_vocabulary} does not fit --init-from-model {args.init_from_model!r}, "
            f"whose model reads {'characters' if characters else 'bytes'} (leave --char-vocabulary out to use the "
            "model's own)."
        )
    run = RunFolder(args.output_dir)
    resume_path = None
    if args.resume_from_checkpoint:
        resume_path = CheckpointManager(run.checkpoints_dir).resolve(args.resume_from_checkpoint)
        read_trainer_state(resume_path)  # JSON only; an earlier version's checkpoint is named as such
        check_checkpoint_files(resume_path)
        init_from, where = None, f"checkpoint {str(resume_path)!r}"
        fixed = (Vocabulary.from_file(resume_path / "vocab.txt"), where)
        saved_characters = resume_path / "char_vocab.json"
        characters = read_characters(saved_characters) if saved_characters.is_file() else None
    vocab = Vocabulary.from_file(args.vocab_file) if args.vocab_file else None
    if fixed is not None and vocab is not None and vocab != fixed[0]:
        raise ValueError(
            f"--vocab-file {args.vocab_file!r} ({len(vocab)} words, fingerprint {vocab.fingerprint()}) does not "
            f"match the vocabulary of {fixed[1]} ({len(fixed[0])} words, fingerprint {fixed[0].fingerprint()})."
        )
    vocab = fixed[0] if fixed is not None else vocab
    planned_characters = len(characters) if characters else args.max_characters
    max_size = args.vocab_size or (model_config["vocab_size"] if model_config.get("vocab_size", 4) > 4 else None)
    build_config(
        model_config, _planned_vocab_size(model_config, vocab, max_size), planned_characters if unicode else None
    )
    given = {split: getattr(args, name) for split, name in _DATA_FLAGS.items()}
    files = {split: tuple(expand_text_files(value, f"--{split}-file")) for split, value in given.items() if value}
    stamps = {path: file_stamp(os.stat(path)) for paths in files.values() for path in paths}
    if args.dataset_name:
        check_hub_dataset(args.dataset_name)
    dataset = " ".join(filter(None, (args.dataset_name, args.dataset_config_name))) or None
    fingerprint = data_fingerprint({k: list(v) for k, v in files.items() if k != "test"}, dataset)
    data_settings, batch_settings, loop_settings = settings_from_arguments(args)
    return Plan(
        run=run,
        folder_mode=check_output_folder(args, run),
        model_config=model_config,
        files=files,
        stamps=stamps,
        data_fingerprint=fingerprint,
        vocab=vocab,
        max_vocab_size=max_size,
        characters=characters if unicode else None,
        unicode=unicode,
        init_from=init_from,
        resume_path=resume_path,
        data=data_settings,
        batches=batch_settings,
        loop=loop_settings,
    )
