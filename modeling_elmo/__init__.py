"""ELMo for the Hugging Face ecosystem.

The package loads lazily: ``import modeling_elmo`` (and the ``elmo`` command's help) imports neither torch nor
transformers. The first name taken from it (``from modeling_elmo import ElmoModel``, ``modeling_elmo.ElmoConfig``)
imports the classes and registers them with transformers' Auto factories (``AutoConfig``, ``AutoModel``,
``AutoModelForSequenceClassification``, ``AutoModelForTokenClassification``, ``AutoModelForPreTraining``,
``AutoTokenizer``), and marks them so that ``save_pretrained`` writes the code files; `register_auto_classes` does it
explicitly. Every `ElmoConfig` carries the full ``auto_map`` (`AUTO_MAP`), so a folder written by any
``save_pretrained`` (a `Trainer`'s ``save_model`` and ``push_to_hub`` included) loads through every Auto class with
``trust_remote_code=True`` where this package is not installed.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the submodule that defines it; imported on first use (`__getattr__`).
_LAZY_NAMES = {
    "AUTO_MAP": "configuration_elmo",
    "ElmoConfig": "configuration_elmo",
    **dict.fromkeys(
        [
            "ElmoBidirectionalLMOutput",
            "ElmoBiLstm",
            "ElmoCharConvolution",
            "ElmoCharacterEncoder",
            "ElmoForBidirectionalLM",
            "ElmoForSequenceClassification",
            "ElmoForTokenClassification",
            "ElmoHighway",
            "ElmoLstmLayer",
            "ElmoLstmState",
            "ElmoModel",
            "ElmoModelOutput",
            "ElmoPreTrainedModel",
            "ElmoScalarMix",
        ],
        "modeling_elmo",
    ),
    "ElmoTokenizer": "tokenization_elmo",
    **dict.fromkeys(["BOS_CHAR_IDS", "EOS_CHAR_IDS", "decode_char_ids", "encode_words"], "utils.characters"),
    **dict.fromkeys(["ElmoEmbedder", "load_elmo_model", "load_elmo_tokenizer"], "embedding.inference"),
}

if TYPE_CHECKING:
    from .configuration_elmo import AUTO_MAP, ElmoConfig
    from .embedding.inference import ElmoEmbedder, load_elmo_model, load_elmo_tokenizer
    from .modeling_elmo import (
        ElmoBidirectionalLMOutput,
        ElmoBiLstm,
        ElmoCharacterEncoder,
        ElmoCharConvolution,
        ElmoForBidirectionalLM,
        ElmoForSequenceClassification,
        ElmoForTokenClassification,
        ElmoHighway,
        ElmoLstmLayer,
        ElmoLstmState,
        ElmoModel,
        ElmoModelOutput,
        ElmoPreTrainedModel,
        ElmoScalarMix,
    )
    from .tokenization_elmo import ElmoTokenizer
    from .utils.characters import BOS_CHAR_IDS, EOS_CHAR_IDS, decode_char_ids, encode_words

TOKENIZER_AUTO_MAP = {"AutoTokenizer": ["tokenization_elmo.ElmoTokenizer", None]}

_registered = False


def __getattr__(name: str) -> Any:
    if name not in _LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    register_auto_classes()
    value = getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))


def register_auto_classes() -> None:
    """Register the ELMo classes with transformers' Auto factories and mark them for ``save_pretrained``'s code
    files. Runs once; the first name taken from the package calls it."""
    global _registered
    if not _registered:
        _register()
        _registered = True


def _register() -> None:
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForPreTraining,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    from .configuration_elmo import ElmoConfig
    from .modeling_elmo import (
        ElmoForBidirectionalLM,
        ElmoForSequenceClassification,
        ElmoForTokenClassification,
        ElmoModel,
    )
    from .tokenization_elmo import ElmoTokenizer

    try:
        AutoConfig.register(ElmoConfig.model_type, ElmoConfig)
    except ValueError:  # already registered (module reloaded)
        pass
    for auto_class, model_class in (
        (AutoModel, ElmoModel),
        (AutoModelForPreTraining, ElmoForBidirectionalLM),
        (AutoModelForSequenceClassification, ElmoForSequenceClassification),
        (AutoModelForTokenClassification, ElmoForTokenClassification),
    ):
        try:
            auto_class.register(ElmoConfig, model_class)
        except ValueError:
            pass
    try:
        AutoTokenizer.register(ElmoConfig, slow_tokenizer_class=ElmoTokenizer)
    except ValueError:
        pass
    # save_pretrained copies the code files and writes auto_map entries for classes marked like this.
    ElmoConfig.register_for_auto_class()
    ElmoModel.register_for_auto_class("AutoModel")
    ElmoForBidirectionalLM.register_for_auto_class("AutoModelForPreTraining")
    ElmoForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
    ElmoForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
    ElmoTokenizer.register_for_auto_class("AutoTokenizer")


def save_model_folder(
    model: ElmoPreTrainedModel,
    tokenizer: ElmoTokenizer | None,
    folder: str | os.PathLike,
    **save_kwargs: Any,
) -> str:
    """``model.save_pretrained`` (safetensors, code files, full ``auto_map``; a tagger's config naming its
    token-classification pipeline, ``custom_pipelines``) and ``tokenizer.save_pretrained`` into ``folder``: the
    folder loads through every Auto class and pipeline, with or without this package installed."""
    register_auto_classes()
    from .utils.io_utils import follow_umask

    folder = os.fspath(folder)
    if callable(pipelines := getattr(model, "custom_pipelines", None)):  # a tagger's word-level pipeline
        model.config.custom_pipelines = pipelines()
    model.save_pretrained(folder, **save_kwargs)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    for entry in os.scandir(folder):  # transformers writes the weights through a private (0600) temporary file
        if entry.name.endswith(".safetensors") and entry.is_file(follow_symlinks=False):
            follow_umask(entry.path)
    return folder


__all__ = [
    "AUTO_MAP",
    "BOS_CHAR_IDS",
    "EOS_CHAR_IDS",
    "ElmoBiLstm",
    "ElmoBidirectionalLMOutput",
    "ElmoCharConvolution",
    "ElmoCharacterEncoder",
    "ElmoConfig",
    "ElmoEmbedder",
    "ElmoForBidirectionalLM",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoHighway",
    "ElmoLstmLayer",
    "ElmoLstmState",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "ElmoTokenizer",
    "decode_char_ids",
    "encode_words",
    "load_elmo_model",
    "load_elmo_tokenizer",
    "register_auto_classes",
    "save_model_folder",
]
