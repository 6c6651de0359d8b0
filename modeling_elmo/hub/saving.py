"""The model and tokenizer of a checked model folder, saved again as a self-contained remote-code repository.

`load_model_and_tokenizer` loads them with this package's classes (safetensors only); `save_for_hub` saves them with
the shipped code files, a ``config.json`` whose ``auto_map`` lists every auto class and JSON files that hold only
known keys (`config_keys`, `TOKENIZER_CONFIG_KEYS`); `check_auto_map` checks the result. `modeling_elmo.hub.publish`
assembles the repository folder from it.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from ..folders.files import atomic_write_text
from ..folders.run_folder import CODE_FILES, RunFolder
from ..utils.io_utils import read_json_object
from ..utils.vocab_file import vocabulary_size_of
from .safety import custom_pipelines_problem

__all__ = [
    "MODEL_ARCHITECTURES",
    "TOKENIZER_CONFIG_KEYS",
    "TRANSFORMERS_LOAD_KEYS",
    "check_auto_map",
    "config_keys",
    "load_model_and_tokenizer",
    "save_for_hub",
]

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parents[1]
MODEL_ARCHITECTURES = (
    "ElmoModel",
    "ElmoForBidirectionalLM",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
)


def load_model_and_tokenizer(run: RunFolder, dtype: str = "float32"):
    """The model (in ``dtype``, the weights' own) and the tokenizer of a checked folder, without its word vocabulary
    (`modeling_elmo.hub.publish.assemble_repo_folder` copies ``vocab.txt`` as a stream); a word vocabulary whose
    size is not the softmax's is refused (every word id would point at another word's row), read as a stream before
    anything is built."""
    import torch

    from .. import modeling_elmo
    from ..embedding.inference import load_elmo_tokenizer, quiet_load_report
    from ..utils.config_checks import load_config
    from ..utils.weight_checks import check_loading_info, check_weights_fit_config

    config = load_config(run.root, str(run.config_file))
    words = vocabulary_size_of(run.vocab_file)
    if words != config.vocab_size and config.vocab_size != 4:
        raise ValueError(
            f"the tokenizer's vocabulary ({run.vocab_file.name}) has {words} words but the "
            f"model's softmax has {config.vocab_size} rows (config.json vocab_size): word ids would point "
            "at other words' rows. Publish the vocabulary the model was trained with."
        )
    if config.return_dict is not True:  # every caller of a published model expects output objects
        logger.warning(
            "%s sets return_dict %r: published as true (the default), so that the model returns output "
            "objects for everyone who loads it.",
            run.config_file,
            config.return_dict,
        )
        config.return_dict = True
    architectures = list(config.architectures or ["ElmoModel"])
    if architectures[0] not in MODEL_ARCHITECTURES:
        raise ValueError(
            f"{run.config_file} names the architecture {architectures[0]!r}; expected one of "
            f"{', '.join(MODEL_ARCHITECTURES)}."
        )
    model_class = getattr(modeling_elmo, architectures[0])
    check_weights_fit_config(run.root, model_class, config)  # before anything is allocated
    try:
        with quiet_load_report():  # ignore_mismatched_sizes: wrong shapes come back in the info, checked below
            model, info = model_class.from_pretrained(
                run.root,
                config=config,
                use_safetensors=True,
                output_loading_info=True,
                ignore_mismatched_sizes=True,
                dtype=getattr(torch, dtype),
            )
    except Exception as error:  # a damaged file: safetensors' and torch's own error types
        text = " ".join(str(error).split())[:300]
        raise ValueError(f"cannot load the weights in {run.root}: {type(error).__name__}: {text}") from None
    check_loading_info(str(run.root), info)
    try:
        tokenizer = load_elmo_tokenizer(run.root, words=False)
    except ValueError as error:
        raise ValueError(f"the tokenizer in {run.root} cannot be loaded: {error}") from None
    return model.eval(), tokenizer


#: The keys a published ``tokenizer_config.json`` may hold: what `ElmoTokenizer` writes and the tokenizer settings
#: of transformers. Any other key (a loaded file may hold anything: ``apikey``, ``db_url``) is not published.
TOKENIZER_CONFIG_KEYS = frozenset(
    {
        "added_tokens_decoder",
        "additional_special_tokens",
        "auto_map",
        "backend",
        "bos_token",
        "clean_up_tokenization_spaces",
        "do_lower_case",
        "eos_token",
        "extra_special_tokens",
        "max_characters_per_token",
        "model_input_names",
        "model_max_length",
        "pad_token",
        "padding_side",
        "split_pattern",
        "tokenizer_class",
        "truncation_side",
        "unk_token",
    }
)


#: What transformers itself writes into a saved ``tokenizer_config.json`` about how the tokenizer was loaded on this
#: machine (transformers 5 records ``is_local`` and ``local_files_only`` of every ``from_pretrained``; older versions
#: wrote the others): not settings, so neither published nor reported.
TRANSFORMERS_LOAD_KEYS = frozenset(
    {"device_map", "files_loaded", "is_local", "local_files_only", "name_or_path", "special_tokens_map_file"}
)


def config_keys() -> frozenset[str]:
    """The keys a published ``config.json`` may hold: the fields of `ElmoConfig` and transformers' own (not the
    local path it was loaded from). A key a loaded config merely carried along is not published."""
    from ..configuration_elmo import ElmoConfig

    return frozenset(ElmoConfig().to_dict()) - {"_name_or_path"} | {"torch_dtype", "custom_pipelines"}


def _keep_known_keys(path: Path, allowed: frozenset[str], unsaid: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Rewrite the JSON object in ``path`` without the keys outside ``allowed``; return it. The names of the dropped
    keys are logged, except those of ``unsaid`` (what transformers itself writes)."""
    data = read_json_object(path, path.stem, required=True)
    dropped = sorted(set(data) - allowed)
    reported = [key for key in dropped if key not in unsaid]
    if reported:
        logger.warning(
            "not published (not a setting of this package or of transformers): %s of %s", ", ".join(reported), path.name
        )
    if dropped:
        data = {key: value for key, value in data.items() if key in allowed}
        atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def save_for_hub(model: Any, tokenizer: Any, folder: str | os.PathLike) -> None:
    """Save ``model`` and ``tokenizer`` into ``folder`` as a self-contained remote-code repository.

    The package's `save_model_folder` writes the weights (safetensors), the code files and ``config.json`` with the
    full ``auto_map`` (`modeling_elmo.AUTO_MAP`); this also makes sure that ``tokenizer_config.json`` carries
    ``modeling_elmo.TOKENIZER_AUTO_MAP``, that both JSON files hold only known keys (`config_keys`,
    `TOKENIZER_CONFIG_KEYS`) and that all the code files come from this package.
    """
    from .. import TOKENIZER_AUTO_MAP, save_model_folder

    run = RunFolder(folder)
    run.root.mkdir(parents=True, exist_ok=True)
    previous = getattr(model.config, "auto_map", None)
    try:
        save_model_folder(model, tokenizer, run.root)
    finally:
        model.config.auto_map = previous
    _keep_known_keys(run.config_file, config_keys())
    data = _keep_known_keys(run.tokenizer_config_file, TOKENIZER_CONFIG_KEYS, TRANSFORMERS_LOAD_KEYS)
    if data.get("auto_map") != TOKENIZER_AUTO_MAP:
        data["auto_map"] = TOKENIZER_AUTO_MAP
        atomic_write_text(run.tokenizer_config_file, json.dumps(data, indent=2, sort_keys=True) + "\n")
    for name in CODE_FILES:
        shutil.copyfile(PACKAGE_DIR / name, run.root / name)


def check_auto_map(folder: str | os.PathLike) -> None:
    """Raise `ValueError` unless ``config.json``'s ``auto_map`` names every auto class of `modeling_elmo.AUTO_MAP`
    and each entry (and the tokenizer's) points to a class defined in a code file of the folder, and its
    ``custom_pipelines`` (if any) only the folder's own pipeline classes (`safety.custom_pipelines_problem`)."""
    from .. import AUTO_MAP

    run = RunFolder(folder)
    config = read_json_object(run.config_file, "config", required=True)
    problem = custom_pipelines_problem(config.get("custom_pipelines"), run.root)
    if problem:
        raise ValueError(f"{run.config_file}: {problem}; refusing to publish it.")
    auto_map = config.get("auto_map") or {}
    missing = sorted(set(AUTO_MAP) - set(auto_map))
    if missing:
        raise ValueError(f"{run.config_file} auto_map lacks {missing}.")
    tokenizer_map = read_json_object(run.tokenizer_config_file, "tokenizer config", required=True).get("auto_map") or {}
    references = list(auto_map.values()) + [tokenizer_map.get("AutoTokenizer", [None])[0]]
    for reference in references:
        if not isinstance(reference, str) or "." not in reference:
            raise ValueError(f"{run.root}: invalid auto_map entry {reference!r}.")
        module, class_name = reference.split(".", 1)
        code = run.root / f"{module}.py"
        if not code.is_file():
            raise ValueError(f"{run.root}: auto_map entry {reference!r} needs {code.name}, which is missing.")
        defined = {n.name for n in ast.parse(code.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef)}
        if class_name not in defined:
            raise ValueError(f"{run.root}: auto_map entry {reference!r}: {code.name} defines no class {class_name}.")
