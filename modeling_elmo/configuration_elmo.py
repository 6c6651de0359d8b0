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
"""ELMo model configuration, and the character and word ids the tokenizer and the model share."""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

from transformers import PretrainedConfig
from transformers.utils import logging

logger = logging.get_logger(__name__)

#: Character ids of the markers per character vocabulary: begin-of-word, end-of-word, within-word padding, ``<S>``,
#: ``</S>``. "bytes" (bilm-tf, AllenNLP): UTF-8 bytes 0-255 and markers 256-260, all shifted by +1 so that a row of
#: zeros marks an absent word. "unicode" (ELMoForManyLangs): unshifted; 6 is an unknown character, 7 on are listed.
CHARACTER_MARKERS = {"bytes": (259, 260, 261, 257, 258), "unicode": (2, 3, 1, 4, 5)}
UNICODE_UNKNOWN_CHARACTER, UNICODE_FIRST_CHARACTER = 6, 7
#: A word of more than this many characters is no word (the released models read 50).
MAX_CHARACTERS_PER_TOKEN_LIMIT = 1024

#: The four special words every word vocabulary starts with, and their ids.
PAD_WORD, BOS_WORD, EOS_WORD, UNK_WORD = SPECIAL_WORDS = ("<pad>", "<S>", "</S>", "<UNK>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

#: The Auto classes a saved folder answers to with ``trust_remote_code=True``, whichever class was saved.
AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForBidirectionalLM",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
}


def sentence_boundary_char_ids(char_vocabulary: str, max_characters_per_token: int) -> tuple[list[int], list[int]]:
    """The character-id rows of ``<S>`` and ``</S>``: begin-of-word, the sentence marker, end-of-word, padding."""
    bow, eow, pad, bos, eos = CHARACTER_MARKERS[char_vocabulary]
    padding = [pad] * (max_characters_per_token - 3)
    return [bow, bos, eow, *padding], [bow, eos, eow, *padding]


class ElmoConfig(PretrainedConfig):
    r"""Configuration of an ELMo bidirectional language model and its task heads. The defaults build the released
    ``2x4096_512_2048cnn_2xhighway`` model; the original ``options.json`` key of a field is given in parentheses.

    Args:
        vocab_size (`int`, defaults to 4): words of the language-model softmax (``n_tokens_vocab``), counting
            ``<pad> <S> </S> <UNK>`` (ids 0-3); 4 means no word vocabulary (feature extraction).
        projection_dim (`int`, defaults to 512): the per-direction projection P (``lstm.projection_dim``).
        hidden_size (`int`, defaults to ``2 * projection_dim``): the output width, both directions; given alone it sets
            P to half of it. (A ``config.json`` without ``projection_dim`` stored P here and is read that way.)
        cell_size (`int`, defaults to 4096): LSTM memory cells (``lstm.dim``).
        num_hidden_layers (`int`, defaults to 2): LSTM layers per direction (``lstm.n_layers``).
        cell_clip, proj_clip (`float` or `None`, defaults to 3.0): clip of the cell state and of the projected output
            (``lstm.cell_clip``, ``lstm.proj_clip``); `None` turns clipping off.
        use_skip_connections (`bool`, defaults to `True`): residual connections for layers 1 and up.
        char_embedding_dim (`int`, defaults to 16): character embedding size (``char_cnn.embedding.dim``).
        char_cnn_filters (`list[list[int]]`, *optional*): ``[width, count]`` per convolution (``char_cnn.filters``);
            defaults to the released models' 2048 filters of widths 1-7.
        num_highway_layers (`int`, defaults to 2): highway layers (``char_cnn.n_highway``).
        char_cnn_activation (`str`, defaults to `"relu"`): `"relu"` or `"tanh"` (``char_cnn.activation``).
        max_characters_per_token (`int`, defaults to 50): character slots per word, word markers included.
        num_characters (`int`, defaults to 262): rows of the character table: 262 for `"bytes"`, 7 plus the
            tokenizer's characters for `"unicode"`.
        char_vocabulary (`str`, defaults to `"bytes"`): `"bytes"` (UTF-8) or `"unicode"` (the tokenizer's characters).
        word_input_vocab_size, word_input_dim (`int`, defaults to 0): a word-embedding input (ELMoForManyLangs).
        hidden_dropout_prob (`float`, defaults to 0.1): dropout on every LSTM layer's input and before the softmax.
        lstm_implementation (`str`, defaults to `"auto"`): `"loop"`, `"fused"`, `"torch"` (``torch.nn.LSTM``, only
            without clipping) or `"auto"`; all give the same numbers.
        num_output_representations (`int`, defaults to 1): independent scalar mixes of a head.
        scalar_mix_layer_norm (`bool`, defaults to `False`): normalise every layer before mixing.
        scalar_mix_parameters (`list[float]`, *optional*): fixed pre-softmax layer weights (not trained).
        classifier_pooling (`str`, defaults to `"mean"`): `"mean"`, `"max"`, `"mean_max"`, `"first"` or `"last"`.
        classifier_dropout (`float`, defaults to 0.1): dropout on the mixed representation of a head.
        freeze_elmo (`bool`, defaults to `True`): a head builds its biLM frozen (parameters without gradient).
        lm_softmax (`str`, defaults to `"full"`): training loss of `ElmoForBidirectionalLM`, `"full"` or `"sampled"`.
        num_negative_samples (`int`, defaults to 8192): negatives of the sampled softmax.
        lm_softmax_chunk_size (`int`, defaults to 32768): words per chunk of the exact softmax (bounds its memory).
        initializer_range (`float`, defaults to 0.02): kept for transformers' conventions.

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
            if hidden_size is not None and (not _is_int(hidden_size) or hidden_size < 2 or hidden_size % 2):
                raise ValueError(
                    f"`hidden_size` is the output width 2 * projection_dim: it must be an even integer "
                    f">= 2, got {hidden_size!r}."
                )
            projection_dim = 512 if hidden_size is None else hidden_size // 2
        self.vocab_size = vocab_size
        self.projection_dim = projection_dim
        if hidden_size is None:
            hidden_size = 2 * projection_dim if isinstance(projection_dim, int) else projection_dim
        self.hidden_size = hidden_size
        self.cell_size = cell_size
        self.num_hidden_layers = num_hidden_layers
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.use_skip_connections = use_skip_connections
        self.char_embedding_dim = char_embedding_dim
        if char_cnn_filters is None:  # the released models' filters
            char_cnn_filters = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
        self.char_cnn_filters = [list(f) if isinstance(f, (list, tuple)) else f for f in char_cnn_filters]
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
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self.validate_elmo()

    def _check_inherited_kwargs(self, kwargs: dict[str, Any]) -> None:
        """Refuse keys that would replace a member of the class and bad label maps; set the config's own auto_map."""
        fields = {field.name for field in dataclasses.fields(self)} | {"model_type"}
        for key in kwargs:
            member = inspect.getattr_static(type(self), key, None)
            settable = key in fields or (isinstance(member, property) and member.fset is not None)
            if key.startswith("__") or (member is not None and not settable):
                raise ValueError(f"config key {key!r} is not a setting: it would replace ElmoConfig.{key}.")
        for key in ("id2label", "label2id"):
            if kwargs.get(key) is not None and not isinstance(kwargs[key], dict):
                shown = str(kwargs[key])[:80]
                raise ValueError(
                    f"`{key}` must be an object mapping labels, got {type(kwargs[key]).__name__} {shown!r}."
                )
        if kwargs.pop("stateful", None):  # earlier versions wrote `false`
            raise ValueError(
                "`stateful=True` is not a configuration field any more: pass the `lstm_state` of one call to the next."
            )
        if not _is_int(count := kwargs.get("num_labels", 1)) or count < 1:
            raise ValueError(f"`num_labels` must be an integer >= 1, got {count!r}.")
        # Only this package's classes: an entry naming code elsewhere (``owner/name--module.Class``) is dropped.
        auto_map = kwargs.get("auto_map") if isinstance(kwargs.get("auto_map"), dict) else {}
        foreign = sorted(f"{k}: {v!r}" for k, v in auto_map.items() if str(v).split("--")[-1] != AUTO_MAP.get(k))
        if foreign:
            logger.warning("ElmoConfig: ignoring auto_map entries naming other code (%s).", ", ".join(foreign))
        kwargs["auto_map"] = dict(AUTO_MAP)

    @staticmethod
    def upgraded_dict(config_dict: dict[str, Any]) -> dict[str, Any]:
        """A saved config dict in today's meaning: one without ``projection_dim`` stored P in ``hidden_size``."""
        if "projection_dim" not in config_dict and "hidden_size" in config_dict:
            config_dict = dict(config_dict)
            config_dict["projection_dim"] = size = config_dict.pop("hidden_size")
            if _is_int(size):
                config_dict["hidden_size"] = 2 * size
        return config_dict

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any):
        # Fields passed as keyword arguments build the config (and are validated); one size given sets the other.
        config_dict = cls.upgraded_dict(dict(config_dict))
        own = {key: kwargs.pop(key) for key in list(kwargs) if key in _ELMO_FIELDS}
        if len({"hidden_size", "projection_dim"} & set(own)) == 1:
            config_dict.pop("projection_dim" if "hidden_size" in own else "hidden_size", None)
        return super().from_dict({**config_dict, **own}, **kwargs)

    @classmethod
    def _dict_from_json_file(cls, json_file: Any) -> dict[str, Any]:
        return cls.upgraded_dict(super()._dict_from_json_file(json_file))

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path: Any, **kwargs: Any):
        # Refuses a folder without config.json (transformers gives the defaults) and another model type (it warns).
        name = str(pretrained_model_name_or_path)
        try:
            config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        except RecursionError as error:  # nested deeper than the JSON reader follows
            raise ValueError(f"the config.json of {name!r} is not valid JSON: {error}.") from None
        if not config_dict:
            raise ValueError(f"{name!r} holds no config.json: it is not a saved model.")
        if (found := config_dict.get("model_type", cls.model_type)) != cls.model_type:
            raise ValueError(
                f"{name!r} holds a {found!r} model, not an ELMo model (model_type {found!r} instead of 'elmo')."
            )
        return config_dict, kwargs

    @property
    def num_char_cnn_filters(self) -> int:  # the width of the character-CNN output
        return sum(n for _, n in self.char_cnn_filters)

    @property
    def token_features_size(self) -> int:  # the input of the token projection: word vector (if any), CNN features
        return self.word_input_dim * bool(self.word_input_vocab_size) + self.num_char_cnn_filters

    @property
    def num_representation_layers(self) -> int:  # the token layer and one per LSTM layer
        return self.num_hidden_layers + 1

    @property
    def uses_torch_lstm(self) -> bool:
        if self.lstm_implementation == "auto":
            return self.cell_clip is None and self.proj_clip is None
        return self.lstm_implementation == "torch"

    def validate_elmo(self) -> None:
        """Raise a `ValueError` naming the first field whose value cannot build a model."""
        for name, (valid, expected) in _FIELD_RULES.items():
            if not valid(getattr(self, name)):
                raise ValueError(f"`{name}` must be {expected} {getattr(self, name)!r}.")
        filters, mix, P = self.char_cnn_filters, self.scalar_mix_parameters, self.projection_dim
        if not isinstance(filters, list) or not filters:
            raise ValueError(f"`char_cnn_filters` must be a non-empty list of [width, count] pairs, got {filters!r}.")
        for pair in filters:
            if not isinstance(pair, list) or len(pair) != 2 or not all(_is_int(v) and v >= 1 for v in pair):
                raise ValueError(
                    f"every `char_cnn_filters` entry must be [width, count] with positive integers, got {pair!r}."
                )
        widest, unicode, layers = (
            max(w for w, _ in filters),
            self.char_vocabulary == "unicode",
            self.num_hidden_layers + 1,
        )
        words, chars, clips = self.word_input_vocab_size, self.num_characters, (self.cell_clip, self.proj_clip)
        for bad, message in (
            (
                self.hidden_size != 2 * P,
                f"`hidden_size` must be 2 * projection_dim = {2 * P} (the output width, both directions), "
                f"got {self.hidden_size!r}.",
            ),
            (
                self.lstm_implementation == "torch" and clips != (None, None),
                "`lstm_implementation='torch'` cannot clip (torch.nn.LSTM has no clipping), but cell_clip={!r} and "
                "proj_clip={!r}; set both to None.".format(*clips),
            ),
            (
                self.max_characters_per_token > MAX_CHARACTERS_PER_TOKEN_LIMIT,
                f"`max_characters_per_token` must be at most {MAX_CHARACTERS_PER_TOKEN_LIMIT} (characters per word), "
                f"got {self.max_characters_per_token}.",
            ),
            (
                widest > self.max_characters_per_token,
                f"a char_cnn filter of width {widest} is wider than max_characters_per_token="
                f"{self.max_characters_per_token}.",
            ),
            (
                not unicode and chars != 262,
                f"`num_characters` must be 262 (256 bytes + 5 markers + the padding id 0), got {chars!r}.",
            ),
            (unicode and chars < 7, f"`num_characters` must be an integer >= 7, got {chars!r}."),
            (
                words and (words < 4 or not self.word_input_dim),
                "a word input needs word_input_vocab_size >= 4 (the special words come first) and word_input_dim "
                f">= 1, got {words} and {self.word_input_dim}.",
            ),
            (
                mix is not None and len(mix) != layers,
                f"`scalar_mix_parameters` needs one weight per layer ({layers}), got {len(mix or ())}: {mix!r}.",
            ),
            (
                self.lm_softmax == "sampled" and self.num_negative_samples >= self.vocab_size,
                f"`num_negative_samples` ({self.num_negative_samples}) must be smaller than vocab_size "
                f"({self.vocab_size}) for a sampled softmax; use lm_softmax='full' for a small vocabulary.",
            ),
        ):
            if bad:
                raise ValueError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_INTEGER_MINIMUMS = dict(
    vocab_size=4,
    projection_dim=1,
    cell_size=1,
    num_hidden_layers=1,
    char_embedding_dim=1,
    num_highway_layers=0,
    max_characters_per_token=3,
    num_characters=1,
    word_input_vocab_size=0,
    word_input_dim=0,
    num_output_representations=1,
    num_negative_samples=1,
    lm_softmax_chunk_size=1,
)
_CHOICES = {
    "char_cnn_activation": ("relu", "tanh"),
    "lstm_implementation": ("auto", "loop", "fused", "torch"),
    "classifier_pooling": ("mean", "max", "mean_max", "first", "last"),
    "lm_softmax": ("full", "sampled"),
    "char_vocabulary": ("bytes", "unicode"),
}
_POSITIVE_CLIP = (
    lambda v: v is None or (_is_number(v) and math.isfinite(v) and v > 0),
    "a finite positive number or None (no clipping), got",
)
#: Field -> (whether a value is valid, what the field must be): the checks of single fields, in order.
_FIELD_RULES = {
    **{
        n: (lambda v, low=low: _is_int(v) and v >= low, f"an integer >= {low}, got")
        for n, low in _INTEGER_MINIMUMS.items()
    },
    **{n: (lambda v, ok=ok: v in ok, f"one of {', '.join(map(repr, ok))}; got") for n, ok in _CHOICES.items()},
    **dict.fromkeys(
        ("use_skip_connections", "scalar_mix_layer_norm", "freeze_elmo"),
        (lambda v: isinstance(v, bool), "true or false, got"),
    ),
    **dict.fromkeys(
        ("hidden_dropout_prob", "classifier_dropout"),
        (lambda v: _is_number(v) and 0.0 <= v < 1.0, "a probability in [0, 1), got"),
    ),
    **dict.fromkeys(("cell_clip", "proj_clip"), _POSITIVE_CLIP),
}
#: The fields of `ElmoConfig` itself (its constructor's arguments).
_ELMO_FIELDS = frozenset(inspect.signature(ElmoConfig.__init__).parameters) - {"self", "kwargs"}

__all__ = ["ElmoConfig"]
