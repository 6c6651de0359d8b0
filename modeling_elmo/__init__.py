"""ELMo for the Hugging Face ecosystem.

Importing the package registers the ELMo classes with transformers' Auto factories (``AutoConfig``,
``AutoModel``, ``AutoModelForSequenceClassification``, ``AutoModelForTokenClassification``,
``AutoModelForPreTraining``, ``AutoTokenizer``), and marks them so that ``save_pretrained`` writes the code files
and an ``auto_map``: a saved folder then also loads with ``trust_remote_code=True`` where this package is not
installed. `save_model_folder` writes such a folder with the full ``auto_map`` whatever class is saved.
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

from .configuration_elmo import ElmoConfig
from .modeling_elmo import (
    ElmoBidirectionalLMOutput,
    ElmoBiLstm,
    ElmoCharacterEncoder,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoHighway,
    ElmoLstmLayer,
    ElmoModel,
    ElmoModelOutput,
    ElmoPreTrainedModel,
    ElmoScalarMix,
)
from .tokenization_elmo import BOS_CHAR_IDS, EOS_CHAR_IDS, ElmoTokenizer, decode_char_ids, encode_words

__version__ = "0.1.0"

#: Every Auto class a saved ELMo folder answers to, and the class (in the shipped code files) it loads.
AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForBidirectionalLM",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
}
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
    """Save ``model`` (safetensors), ``tokenizer``, the code files and the full ``auto_map`` into ``folder``.

    Whatever head ``model`` is, the folder loads through every Auto class of `AUTO_MAP` (a base checkpoint into a
    task head gets a freshly initialised head), with or without this package installed
    (``trust_remote_code=True``).
    """
    folder = os.fspath(folder)
    model.config.auto_map = dict(AUTO_MAP)
    model.save_pretrained(folder, safe_serialization=True, **save_kwargs)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


__all__ = [
    "AUTO_MAP",
    "BOS_CHAR_IDS",
    "EOS_CHAR_IDS",
    "ElmoBiLstm",
    "ElmoBidirectionalLMOutput",
    "ElmoCharacterEncoder",
    "ElmoConfig",
    "ElmoForBidirectionalLM",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoHighway",
    "ElmoLstmLayer",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoScalarMix",
    "ElmoTokenizer",
    "decode_char_ids",
    "encode_words",
    "save_model_folder",
]
