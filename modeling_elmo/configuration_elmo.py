# Copyright 2026 The modeling_elmo authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""ELMo model configuration.

The fields mirror the two blocks of the original ``options.json`` (``lstm.*`` and ``char_cnn.*``), plus what a
transformers model needs on top: the word vocabulary of the language-model softmax, dropout, the scalar mix and the
task heads. Shipped to the Hub as custom code: it imports only transformers.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

from transformers import PretrainedConfig
from transformers.utils import logging

logger = logging.get_logger(__name__)

# ----------------------------------------------------------------------------------------------------------------
# Ids shared by the tokenizer, the model and the pretraining code
# ----------------------------------------------------------------------------------------------------------------
# Character ids of the original ELMo alphabet (bilm-tf ``UnicodeCharsVocabulary``, AllenNLP ``ELMoCharacterMapper``):
# raw ids 0-255 are the UTF-8 bytes of a word, then five markers; at inference every id is shifted by +1 so that 0
# can mark an absent token (a whole row of zeros pads a sentence).
BEGINNING_OF_SENTENCE_CHARACTER = 256  # the single "character" of <S>
END_OF_SENTENCE_CHARACTER = 257  # the single "character" of </S>
BEGINNING_OF_WORD_CHARACTER = 258
END_OF_WORD_CHARACTER = 259
PADDING_CHARACTER = 260  # fills the slots after end-of-word
INFERENCE_SHIFT = 1
#: The highest character id a model accepts (the within-word padding, shifted).
MAX_CHARACTER_ID = PADDING_CHARACTER + INFERENCE_SHIFT

#: The four special words every word vocabulary starts with, and their word ids 0-3.
PAD_WORD, BOS_WORD, EOS_WORD, UNK_WORD = "<pad>", "<S>", "</S>", "<UNK>"
SPECIAL_WORDS = (PAD_WORD, BOS_WORD, EOS_WORD, UNK_WORD)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def sentence_marker_char_ids(marker: int, max_characters_per_token: int) -> list[int]:
    """The character-id row (inference scheme) of ``<S>`` (``marker`` 256) or ``</S>`` (257):
    begin-of-word, the marker, end-of-word, then padding."""
    row = [BEGINNING_OF_WORD_CHARACTER, marker, END_OF_WORD_CHARACTER]
    row += [PADDING_CHARACTER] * (max_characters_per_token - len(row))
    return [value + INFERENCE_SHIFT for value in row]

#: The Unicode character vocabulary (``char_vocabulary="unicode"``): characters are code points looked up in a
#: vocabulary saved with the tokenizer. Its ids are used as they are (no shift): 0 marks an absent token, then the
#: within-word padding, the word and sentence markers and the unknown character; the listed characters follow.
UNICODE_PADDING_CHARACTER = 1
UNICODE_BEGINNING_OF_WORD_CHARACTER = 2
UNICODE_END_OF_WORD_CHARACTER = 3
UNICODE_BEGINNING_OF_SENTENCE_CHARACTER = 4
UNICODE_END_OF_SENTENCE_CHARACTER = 5
UNICODE_UNKNOWN_CHARACTER = 6
#: The id of the first listed character of a Unicode vocabulary (the table has this many rows before it).
UNICODE_FIRST_CHARACTER = 7
CHAR_VOCABULARIES = ("bytes", "unicode")


def sentence_boundary_char_ids(char_vocabulary: str, max_characters_per_token: int) -> tuple[list[int], list[int]]:
    """The character-id rows of ``<S>`` and ``</S>`` as the model sees them, for either character vocabulary:
    begin-of-word, the sentence marker, end-of-word, then within-word padding."""
    if char_vocabulary == "bytes":
        return (sentence_marker_char_ids(BEGINNING_OF_SENTENCE_CHARACTER, max_characters_per_token),
                sentence_marker_char_ids(END_OF_SENTENCE_CHARACTER, max_characters_per_token))
    rows = []
    for marker in (UNICODE_BEGINNING_OF_SENTENCE_CHARACTER, UNICODE_END_OF_SENTENCE_CHARACTER):
        row = [UNICODE_BEGINNING_OF_WORD_CHARACTER, marker, UNICODE_END_OF_WORD_CHARACTER]
        rows.append(row + [UNICODE_PADDING_CHARACTER] * (max_characters_per_token - len(row)))
    return rows[0], rows[1]


#: Filters of every released model: ``[width, number of filters]``; 2048 filters in all.
ORIGINAL_CHAR_CNN_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]

#: Every Auto class a saved ELMo folder answers to, and the class of the shipped code files it loads. Every config
#: carries it, so any ``save_pretrained`` (``Trainer.save_model`` and ``push_to_hub`` included) writes a folder that
#: loads through all of them with ``trust_remote_code=True``, whichever class was saved.
AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForBidirectionalLM",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
}


def own_auto_map(auto_map: Any) -> dict[str, str]:
    """The ``auto_map`` an ELMo config carries: always `AUTO_MAP`, whatever a loaded ``config.json`` said.

    An entry naming code in another Hub repository (``owner/name--module.Class``, which ``trust_remote_code=True``
    would fetch and run) or another module or class is never carried into a folder this config is saved to; it is
    dropped with a warning. (transformers itself prefixes the entries of a config loaded from a Hub repository with
    that repository; those entries name this package's classes and are dropped silently: the folder a config is
    saved to ships the code files.)"""
    if isinstance(auto_map, dict):
        foreign = {key: value for key, value in auto_map.items()
                   if not (isinstance(value, str) and value.split("--")[-1] == AUTO_MAP.get(key))}
        if foreign:
            logger.warning(
                "ElmoConfig: ignoring auto_map entries that do not name this package's classes (%s); the config "
                "carries its own auto_map.", ", ".join(f"{key}: {value!r}" for key, value in sorted(foreign.items())))
    return dict(AUTO_MAP)


#: A word of more than this many characters is no word (the released models read 50).
MAX_CHARACTERS_PER_TOKEN_LIMIT = 1024

CHAR_CNN_ACTIVATIONS = ("relu", "tanh")
LSTM_IMPLEMENTATIONS = ("auto", "loop", "fused", "torch")
CLASSIFIER_POOLINGS = ("mean", "max", "mean_max", "first", "last")
LM_SOFTMAX_KINDS = ("full", "sampled")


class ElmoConfig(PretrainedConfig):
    r"""Configuration of an ELMo bidirectional language model and its task heads.

    The defaults build the original released model ``2x4096_512_2048cnn_2xhighway`` (93.6 M parameters without the
    softmax). The original ``options.json`` key a field mirrors is given in parentheses.

    Args:
        vocab_size (`int`, defaults to 4): words of the language-model softmax (``n_tokens_vocab``), counting
            ``<pad>`` (0), ``<S>`` (1), ``</S>`` (2) and ``<UNK>`` (3); 4 means no word vocabulary (feature extraction).
        projection_dim (`int`, defaults to 512): the per-direction projection P (``lstm.projection_dim``): the token
            embedding and every LSTM output of one direction.
        hidden_size (`int`, defaults to ``2 * projection_dim``): the width of every output vector
            (``last_hidden_state.shape[-1]``), forward and backward concatenated. Give either field; given alone,
            ``hidden_size`` must be even and sets P to half of it. (A ``config.json`` without ``projection_dim``,
            written by earlier versions, stored P in ``hidden_size`` and is read that way.)
        cell_size (`int`, defaults to 4096): LSTM memory cells H (``lstm.dim``).
        num_hidden_layers (`int`, defaults to 2): LSTM layers per direction (``lstm.n_layers``).
        cell_clip, proj_clip (`float` or `None`, default 3.0): clip of the cell state (before its ``tanh``) and of the
            projected output (``lstm.cell_clip``, ``lstm.proj_clip``); `None` turns clipping off.
        use_skip_connections (`bool`, defaults to `True`): residual connections for layers 1 and up.
        char_embedding_dim (`int`, defaults to 16): character embedding size (``char_cnn.embedding.dim``).
        char_cnn_filters (`list[list[int]]`): ``[width, count]`` per convolution (``char_cnn.filters``); defaults to
            the released models' seven widths with 2048 filters in all.
        num_highway_layers (`int`, defaults to 2): highway layers (``char_cnn.n_highway``).
        char_cnn_activation (`str`, defaults to `"relu"`): `"relu"` or `"tanh"` (``char_cnn.activation``).
        max_characters_per_token (`int`, defaults to 50): character slots per token, word markers included.
        num_characters (`int`, defaults to 262): rows of the character table: 262 for ``"bytes"``; for ``"unicode"``,
            7 reserved rows plus one per character of the tokenizer's vocabulary.
        char_vocabulary (`str`, defaults to `"bytes"`): `"bytes"` (UTF-8 bytes, the released English models) or
            `"unicode"` (code points looked up in the tokenizer's ``char_vocab.json``).
        word_input_vocab_size, word_input_dim (`int`, default 0): an optional word-embedding input (ELMoForManyLangs):
            its rows and size; the word vector is concatenated before the character features.
        hidden_dropout_prob (`float`, defaults to 0.1): dropout on every LSTM layer's input and on the top layer
            before the softmax, in pretraining (``dropout``).
        lstm_implementation (`str`, defaults to `"auto"`): `"loop"`, `"fused"`, `"torch"` (``torch.nn.LSTM``, only
            without clipping) or `"auto"`; all give the same numbers.
        num_output_representations (`int`, defaults to 1): independent scalar mixes of a head.
        scalar_mix_layer_norm (`bool`, defaults to `False`): normalise every layer before mixing.
        scalar_mix_parameters (`list[float]`, *optional*): fixed pre-softmax layer weights (not trained).
        classifier_pooling (`str`, defaults to `"mean"`): `"mean"`, `"max"`, `"mean_max"`, `"first"` or `"last"`.
        classifier_dropout (`float`, defaults to 0.1): dropout on the mixed representation of a head.
        freeze_elmo (`bool`, defaults to `True`): a head builds (and loads) its biLM frozen: parameters without
            gradient; ``model.unfreeze_elmo()`` / ``freeze_elmo()`` change that later.
        lm_softmax (`str`, defaults to `"full"`): training loss of `ElmoForBidirectionalLM`, `"full"` or `"sampled"`.
        num_negative_samples (`int`, defaults to 8192): negatives of the sampled softmax.
        lm_softmax_chunk_size (`int`, defaults to 32768): words per chunk of the exact softmax (bounds its memory).
        initializer_range (`float`, defaults to 0.02): kept for transformers' conventions (see `_init_weights`).

    Example:

    ```python
    >>> from modeling_elmo import ElmoConfig, ElmoModel
    >>> config = ElmoConfig(projection_dim=16, cell_size=64, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1)
    >>> model = ElmoModel(config)
    >>> config.hidden_size
    32
    ```
    """

    model_type = "elmo"

    def __init__(
        self,
        vocab_size: int = 4,
        projection_dim: int | None = None,
        hidden_size: int | None = None,
        cell_size: int = 4096,
        num_hidden_layers: int = 2,
        cell_clip: float | None = 3.0,
        proj_clip: float | None = 3.0,
        use_skip_connections: bool = True,
        char_embedding_dim: int = 16,
        char_cnn_filters: list[list[int]] | None = None,
        num_highway_layers: int = 2,
        char_cnn_activation: str = "relu",
        max_characters_per_token: int = 50,
        num_characters: int = 262,
        char_vocabulary: str = "bytes",
        word_input_vocab_size: int = 0,
        word_input_dim: int = 0,
        hidden_dropout_prob: float = 0.1,
        lstm_implementation: str = "auto",
        num_output_representations: int = 1,
        scalar_mix_layer_norm: bool = False,
        scalar_mix_parameters: list[float] | None = None,
        classifier_pooling: str = "mean",
        classifier_dropout: float = 0.1,
        freeze_elmo: bool = True,
        lm_softmax: str = "full",
        num_negative_samples: int = 8192,
        lm_softmax_chunk_size: int = 32768,
        initializer_range: float = 0.02,
        pad_token_id: int = 0,
        bos_token_id: int = 1,
        eos_token_id: int = 2,
        unk_token_id: int = 3,
        **kwargs: Any,
    ):
        if projection_dim is None:
            if hidden_size is not None and (isinstance(hidden_size, bool) or not isinstance(hidden_size, int)
                                            or hidden_size < 2 or hidden_size % 2):
                raise ValueError(f"`hidden_size` is the output width 2 * projection_dim: it must be an even integer "
                                 f">= 2, got {hidden_size!r}.")
            projection_dim = 512 if hidden_size is None else hidden_size // 2
        self.vocab_size = vocab_size
        self.projection_dim = projection_dim
        self.hidden_size = hidden_size if hidden_size is not None else (
            2 * projection_dim if isinstance(projection_dim, int) else projection_dim)
        self.cell_size = cell_size
        self.num_hidden_layers = num_hidden_layers
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.use_skip_connections = use_skip_connections
        self.char_embedding_dim = char_embedding_dim
        self.char_cnn_filters = [
            list(f) if isinstance(f, (list, tuple)) else f
            for f in (ORIGINAL_CHAR_CNN_FILTERS if char_cnn_filters is None else char_cnn_filters)
        ]
        self.num_highway_layers = num_highway_layers
        self.char_cnn_activation = char_cnn_activation
        self.max_characters_per_token = max_characters_per_token
        self.num_characters = num_characters
        self.char_vocabulary = char_vocabulary
        self.word_input_vocab_size = word_input_vocab_size
        self.word_input_dim = word_input_dim
        self.hidden_dropout_prob = hidden_dropout_prob
        self.lstm_implementation = lstm_implementation
        self.num_output_representations = num_output_representations
        self.scalar_mix_layer_norm = scalar_mix_layer_norm
        self.scalar_mix_parameters = list(scalar_mix_parameters) if scalar_mix_parameters is not None else None
        self.classifier_pooling = classifier_pooling
        self.classifier_dropout = classifier_dropout
        self.freeze_elmo = freeze_elmo
        self.lm_softmax = lm_softmax
        self.num_negative_samples = num_negative_samples
        self.lm_softmax_chunk_size = lm_softmax_chunk_size
        self.initializer_range = initializer_range
        self.unk_token_id = unk_token_id
        self._check_inherited_kwargs(kwargs)
        kwargs["auto_map"] = own_auto_map(kwargs.get("auto_map"))
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self.validate_elmo()

    def _check_inherited_kwargs(self, kwargs: dict[str, Any]) -> None:
        """Refuse a key that would replace a method or property of the class (``to_dict``, ``use_return_dict``,
        ``__class__``...), label maps that are not objects, and the retired ``stateful=True``. Any other unknown key
        is kept as an attribute, as transformers keeps it."""
        fields = {field.name for field in dataclasses.fields(self)} | {"model_type"}
        for key in kwargs:
            member = inspect.getattr_static(type(self), key, None)
            if key.startswith("__") or (member is not None and key not in fields
                                        and not (isinstance(member, property) and member.fset is not None)):
                raise ValueError(f"config key {key!r} is not a setting: it would replace ElmoConfig.{key}.")
        for key in ("id2label", "label2id"):
            if kwargs.get(key) is not None and not isinstance(kwargs[key], dict):
                raise ValueError(f"`{key}` must be an object mapping labels, got {type(kwargs[key]).__name__} "
                                 f"{str(kwargs[key])[:80]!r}.")
        if kwargs.get("stateful"):
            raise ValueError("`stateful=True` is not a configuration field any more: pass the `lstm_state` of one "
                             "call to the next to carry LSTM states between batches.")
        kwargs.pop("stateful", None)  # written as false by earlier versions
        count = kwargs.get("num_labels", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"`num_labels` must be an integer >= 1, got {count!r}.")

    @staticmethod
    def upgraded_dict(config_dict: dict[str, Any]) -> dict[str, Any]:
        """A saved config dict in today's meaning (a new dict): one without ``projection_dim`` (written before that
        field existed) stored the projection P in ``hidden_size``."""
        if "projection_dim" not in config_dict and "hidden_size" in config_dict:
            config_dict = {**config_dict, "projection_dim": config_dict["hidden_size"]}
            if isinstance(config_dict["projection_dim"], int) and not isinstance(config_dict["projection_dim"], bool):
                config_dict["hidden_size"] = 2 * config_dict["projection_dim"]
            else:
                del config_dict["hidden_size"]
        return config_dict

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any):
        """transformers' `from_dict`, reading a dict saved before ``projection_dim`` existed in its meaning; fields
        of this class passed as keyword arguments build the config with it (and are validated)."""
        config_dict = cls.upgraded_dict(dict(config_dict))
        own = {key: kwargs.pop(key) for key in list(kwargs) if key in _ELMO_FIELDS}
        if len({"hidden_size", "projection_dim"} & set(own)) == 1:  # one size given: the other follows from it
            config_dict.pop("projection_dim" if "hidden_size" in own else "hidden_size", None)
        return super().from_dict({**config_dict, **own}, **kwargs)

    @classmethod
    def _dict_from_json_file(cls, json_file: Any) -> dict[str, Any]:
        return cls.upgraded_dict(super()._dict_from_json_file(json_file))

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """transformers' reader, refusing a folder without ``config.json`` (it would give the default config) and a
        config of another model type (transformers only warns)."""
        try:
            config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        except RecursionError as error:  # a config.json nested deeper than the JSON reader follows
            raise ValueError(f"the config.json of {str(pretrained_model_name_or_path)!r} is not valid JSON: "
                             f"{error}.") from None
        if not config_dict:
            raise ValueError(f"{str(pretrained_model_name_or_path)!r} holds no config.json: it is not a saved model.")
        found = config_dict.get("model_type", cls.model_type)
        if found != cls.model_type:
            raise ValueError(f"{str(pretrained_model_name_or_path)!r} holds a {found!r} model, not an ELMo model "
                             f"(model_type {found!r} instead of {cls.model_type!r}).")
        return config_dict, kwargs

    # ------------------------------------------------------------------ derived sizes
    @property
    def num_char_cnn_filters(self) -> int:
        """F: the width of the character-CNN output (sum of the filter counts)."""
        return sum(n for _, n in self.char_cnn_filters)

    @property
    def token_features_size(self) -> int:
        """The input width of the token projection: the word vector (if any) then the F character features."""
        return self.word_input_dim * bool(self.word_input_vocab_size) + self.num_char_cnn_filters

    @property
    def max_character_id(self) -> int:
        """The highest character id an input may hold."""
        return self.num_characters - 1

    @property
    def num_representation_layers(self) -> int:
        """Layers a head can mix: the token layer plus one per LSTM layer."""
        return self.num_hidden_layers + 1

    @property
    def uses_torch_lstm(self) -> bool:
        """Whether the LSTM stacks run through ``torch.nn.LSTM`` (cuDNN) rather than the clipping loop."""
        if self.lstm_implementation == "auto":
            return self.cell_clip is None and self.proj_clip is None
        return self.lstm_implementation == "torch"

    # ------------------------------------------------------------------ validation
    def validate_elmo(self) -> None:
        """Raise a `ValueError` naming the first field whose value cannot build a model."""
        for name, minimum in _INTEGER_MINIMUMS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {', '.join(map(repr, allowed))}; "
                                 f"got {getattr(self, name)!r}.")
        for name in ("use_skip_connections", "scalar_mix_layer_norm", "freeze_elmo"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be true or false, got {getattr(self, name)!r}.")
        for name in ("hidden_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be a probability in [0, 1), got {value!r}.")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"`{name}` must be a finite positive number or None (no clipping), got {value!r}.")
        if self.hidden_size != 2 * self.projection_dim:
            raise ValueError(f"`hidden_size` must be 2 * projection_dim = {2 * self.projection_dim} (the output width, "
                             f"both directions), got {self.hidden_size!r}.")
        if self.lstm_implementation == "torch" and (self.cell_clip is not None or self.proj_clip is not None):
            raise ValueError(f"`lstm_implementation='torch'` cannot clip (torch.nn.LSTM has no clipping), but "
                             f"cell_clip={self.cell_clip!r} and proj_clip={self.proj_clip!r}; set both to None.")
        filters = self.char_cnn_filters
        if not isinstance(filters, list) or not filters:
            raise ValueError(f"`char_cnn_filters` must be a non-empty list of [width, count] pairs, got {filters!r}.")
        for pair in filters:
            if (not isinstance(pair, list) or len(pair) != 2
                    or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in pair)):
                raise ValueError(f"every `char_cnn_filters` entry must be [width, count] with positive integers, got {pair!r}.")
        if self.max_characters_per_token > MAX_CHARACTERS_PER_TOKEN_LIMIT:
            raise ValueError(f"`max_characters_per_token` must be at most {MAX_CHARACTERS_PER_TOKEN_LIMIT} (characters "
                             f"per word), got {self.max_characters_per_token}.")
        widest = max(width for width, _ in filters)
        if widest > self.max_characters_per_token:
            raise ValueError(f"a char_cnn filter of width {widest} is wider than max_characters_per_token="
                             f"{self.max_characters_per_token}.")
        if self.char_vocabulary == "bytes" and self.num_characters != 262:
            raise ValueError(f"`num_characters` must be 262 (256 bytes + 5 markers + the padding id 0), got "
                             f"{self.num_characters!r}.")
        if self.char_vocabulary == "unicode" and self.num_characters < UNICODE_FIRST_CHARACTER:
            raise ValueError(f"`num_characters` must be an integer >= {UNICODE_FIRST_CHARACTER}, "
                             f"got {self.num_characters!r}.")
        if self.word_input_vocab_size and (self.word_input_vocab_size < 4 or not self.word_input_dim):
            raise ValueError(f"a word input needs word_input_vocab_size >= 4 (the special words come first) and "
                             f"word_input_dim >= 1, got {self.word_input_vocab_size} and {self.word_input_dim}.")
        if self.scalar_mix_parameters is not None and len(self.scalar_mix_parameters) != self.num_representation_layers:
            raise ValueError(f"`scalar_mix_parameters` needs one weight per layer ({self.num_representation_layers}), "
                             f"got {len(self.scalar_mix_parameters)}: {self.scalar_mix_parameters!r}.")
        if self.lm_softmax == "sampled" and self.num_negative_samples >= self.vocab_size:
            raise ValueError(f"`num_negative_samples` ({self.num_negative_samples}) must be smaller than vocab_size "
                             f"({self.vocab_size}) for a sampled softmax; use lm_softmax='full' for a small "
                             "vocabulary.")


_INTEGER_MINIMUMS = {"vocab_size": 4, "projection_dim": 1, "cell_size": 1, "num_hidden_layers": 1,
                     "char_embedding_dim": 1, "num_highway_layers": 0, "max_characters_per_token": 3, "num_characters": 1,
                     "word_input_vocab_size": 0, "word_input_dim": 0, "num_output_representations": 1,
                     "num_negative_samples": 1, "lm_softmax_chunk_size": 1}
_CHOICES = {"char_cnn_activation": CHAR_CNN_ACTIVATIONS, "lstm_implementation": LSTM_IMPLEMENTATIONS,
            "classifier_pooling": CLASSIFIER_POOLINGS, "lm_softmax": LM_SOFTMAX_KINDS,
            "char_vocabulary": CHAR_VOCABULARIES}

#: The fields of `ElmoConfig` itself (its constructor's arguments).
_ELMO_FIELDS = frozenset(inspect.signature(ElmoConfig.__init__).parameters) - {"self", "kwargs"}

__all__ = ["AUTO_MAP", "CHAR_VOCABULARIES", "ElmoConfig", "own_auto_map", "sentence_boundary_char_ids"]
