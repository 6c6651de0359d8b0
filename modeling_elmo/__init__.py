"""ELMo for the Hugging Face ecosystem.

Importing the package registers the ELMo classes with transformers' Auto factories (``AutoConfig``,
``AutoModel``, ``AutoModelForSequenceClassification``, ``AutoModelForTokenClassification``,
``AutoModelForPreTraining``, ``AutoTokenizer``), and marks them so that ``save_pretrained`` writes the code files.
Every `ElmoConfig` carries the full ``auto_map`` (`AUTO_MAP`), so a folder written by any ``save_pretrained`` (a
`Trainer`'s ``save_model`` and ``push_to_hub`` included) loads through every Auto class with
``trust_remote_code=True`` where this package is not installed.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .configuration_elmo import AUTO_MAP, ElmoConfig
from .modeling_elmo import (
    ElmoBidirectionalLMOutput,
    ElmoBiLstm,
    ElmoCharacterEncoder,
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
from .tokenization_elmo import BOS_CHAR_IDS, EOS_CHAR_IDS, ElmoTokenizer, decode_char_ids, encode_words
from .inference import ElmoEmbedder, load_elmo_model, load_elmo_tokenizer  # noqa: E402  (needs the classes above)

__version__ = "0.1.0"

TOKENIZER_AUTO_MAP = {"AutoTokenizer": ["tokenization_elmo.ElmoTokenizer", None]}


def _register() -> None:
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


_register()


def save_model_folder(
    model: ElmoPreTrainedModel,
    tokenizer: ElmoTokenizer | None,
    folder: str | os.PathLike,
    **save_kwargs: Any,
) -> str:
    """``model.save_pretrained`` (safetensors, code files, full ``auto_map``) and ``tokenizer.save_pretrained`` into
    ``folder``: the folder loads through every Auto class, with or without this package installed."""
    from .io_utils import follow_umask

    folder = os.fspath(folder)
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
    "save_model_folder",
]
