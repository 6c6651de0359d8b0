# Copyright 2026 The modeling_elmo authors.
# SPDX-License-Identifier: Apache-2.0 (https://www.apache.org/licenses/LICENSE-2.0)
"""ELMo model configuration."""

from __future__ import annotations

import inspect
import math
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

from transformers import PretrainedConfig

#: The Auto classes a saved folder answers to with ``trust_remote_code=True``, whichever class was saved.
AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForBidirectionalLM",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
}
#: A word of more than this many characters is no word (the released models read 50).
MAX_CHARACTERS_PER_TOKEN_LIMIT = 1024
#: The most rows a word table or softmax may have (the trillion-word Google Web 1T corpus has 13.6 M distinct words).
MAX_VOCABULARY_LIMIT = 10**8
#: The most layers of each kind (the released models: 2): a loader builds them all before it reads a weight.
MAX_LAYERS = 64


def _is_int(value: Any, low: float = 0, high: float = math.inf) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_number(value: Any, low: float = -math.inf, high: float = math.inf) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and low <= value < high


def _integer(low: int, high: int | None = None, what: str = "") -> tuple[Callable[[Any], bool], str]:
    bounds = f">= {low}" if high is None else f"in [{low}, {high:,}]{what}"
    return (lambda v: _is_int(v, low, math.inf if high is None else high)), f"an integer {bounds},"


def _one_of(*choices: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in choices), f"one of {', '.join(map(repr, choices))};"


_FLAG = (lambda v: isinstance(v, bool)), "true or false,"
_CLIP = (lambda v: v is None or _is_number(v, 0) and v > 0), "a finite positive number or None (no clipping),"


def _filters(value: Any) -> bool:
    pairs = isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value)
    return pairs and bool(value) and all(_is_int(n, 1) for p in value for n in p)


def _weights(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(_is_number(w) for w in value))


#: (fields, (whether a value is valid, what the field must be)): the rule of each field on its own, in order.
_RULES = (
    ("projection_dim", _integer(1)),
    ("hidden_size", _integer(2)),
    ("cell_size char_embedding_dim", _integer(1)),
    ("max_characters_per_token", _integer(3, MAX_CHARACTERS_PER_TOKEN_LIMIT, " (characters per word)")),
    ("num_characters", _integer(1)),
    ("word_input_dim", _integer(0)),
    ("num_output_representations num_negative_samples lm_softmax_chunk_size", _integer(1)),
    ("num_hidden_layers", _integer(1, MAX_LAYERS, " (layers)")),
    ("num_highway_layers", _integer(0, MAX_LAYERS, " (layers)")),
    ("vocab_size", _integer(4, MAX_VOCABULARY_LIMIT)),
    ("word_input_vocab_size", _integer(0, MAX_VOCABULARY_LIMIT)),
    ("char_cnn_activation", _one_of("relu", "tanh")),
    ("lstm_implementation", _one_of("auto", "loop", "fused", "torch")),
    ("classifier_pooling", _one_of("mean", "max", "mean_max", "first", "last")),
    ("lm_softmax", _one_of("full", "sampled")),
    ("char_vocabulary", _one_of("bytes", "unicode")),
    ("use_skip_connections scalar_mix_layer_norm freeze_elmo use_packed_kernels", _FLAG),
    # any ids, as transformers' own tests set them; the language model refuses ids other than its vocabulary's
    ("pad_token_id bos_token_id eos_token_id", (lambda v: v is None or _is_int(v), "an integer >= 0 or None,")),
    ("initializer_range", (lambda v: _is_number(v, 0), "a finite number >= 0,")),
    ("hidden_dropout_prob classifier_dropout", (lambda v: _is_number(v, 0, 1), "a probability in [0, 1),")),
    ("cell_clip proj_clip", _CLIP),
    ("char_cnn_filters", (_filters, "a non-empty list of [width, count] pairs of positive integers,")),
    ("scalar_mix_parameters", (_weights, "a list of finite numbers (one weight per layer) or None,")),
)
#: Field -> (whether a value is valid, what the field must be).
FIELD_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {name: r for names, r in _RULES for name in names.split()}


class ElmoConfig(PretrainedConfig):
    r"""Configuration of an ELMo biLM and its task heads; the defaults build the released
    ``2x4096_512_2048cnn_2xhighway`` model (a field's ``options.json`` key in parentheses). A value that would compute
    nonsense (a type, bound or choice a field does not take, fields that disagree) is a one-line `ValueError`.

    Args:
        vocab_size (`int`, defaults to 4): softmax words, ``<pad> <S> </S> <UNK>`` included; 4: no vocabulary.
        projection_dim (`int`, defaults to 512): the per-direction projection P (``lstm.projection_dim``).
        hidden_size (`int`, defaults to ``2 * projection_dim``): the output width; given alone it sets P to half.
        cell_size (`int`, defaults to 4096): LSTM memory cells (``lstm.dim``).
        num_hidden_layers (`int`, defaults to 2): LSTM layers per direction (``lstm.n_layers``).
        cell_clip, proj_clip (`float` or `None`, defaults to 3.0): clips of the cell state and projection; `None`: off.
        use_skip_connections (`bool`, defaults to `True`): residual connections for layers 1 and up.
        char_embedding_dim (`int`, defaults to 16): character embedding size (``char_cnn.embedding.dim``).
        char_cnn_filters (`list[list[int]]`, *optional*): ``[width, count]`` per convolution; the released 2048 filters.
        num_highway_layers (`int`, defaults to 2): highway layers (``char_cnn.n_highway``).
        char_cnn_activation (`str`, defaults to `"relu"`): `"relu"` or `"tanh"` (``char_cnn.activation``).
        max_characters_per_token (`int`, defaults to 50): character slots per word, word markers included.
        num_characters (`int`, defaults to 262): character-table rows: 262 (bytes), 7 + the tokenizer's (unicode).
        char_vocabulary (`str`, defaults to `"bytes"`): `"bytes"` (UTF-8) or `"unicode"` (the tokenizer's characters).
        word_input_vocab_size, word_input_dim (`int`, defaults to 0): a word-embedding input (ELMoForManyLangs).
        hidden_dropout_prob (`float`, defaults to 0.1): dropout on every LSTM layer's input and before the softmax.
        lstm_implementation (`str`, defaults to `"auto"`): `"loop"`, `"fused"`, `"torch"` (no clipping) or `"auto"`.
        use_packed_kernels (`bool`, defaults to `True`): the installed package's faster LSTM kernels (same numbers).
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
    >>> model = ElmoModel(ElmoConfig(projection_dim=16, cell_size=64, char_cnn_filters=[[1, 4]], num_highway_layers=1))
    >>> model.config.hidden_size
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
        use_packed_kernels: bool = True,
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
        sizes = {"projection_dim": projection_dim, "hidden_size": hidden_size}
        self.check_fields({name: size for name, size in sizes.items() if size is not None})
        if projection_dim is None:  # one size given sets the other
            projection_dim = 512 if hidden_size is None else hidden_size // 2
        hidden_size = 2 * projection_dim if hidden_size is None else hidden_size
        if hidden_size != 2 * projection_dim:
            width = f"2 * projection_dim = {2 * projection_dim} (the output width, both directions)"
            raise ValueError(f"`hidden_size` must be {width}, got {hidden_size!r}.")
        if lstm_implementation == "torch" and (cell_clip, proj_clip) != (None, None):  # it would run unclipped
            clips = f"but cell_clip={cell_clip!r} and proj_clip={proj_clip!r}; set both to None"
            raise ValueError(f"`lstm_implementation='torch'` cannot clip (torch.nn.LSTM has no clipping), {clips}.")
        self.vocab_size = vocab_size
        self.projection_dim = projection_dim
        self.hidden_size = hidden_size
        self.cell_size = cell_size
        self.num_hidden_layers = num_hidden_layers
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.use_skip_connections = use_skip_connections
        self.char_embedding_dim = char_embedding_dim
        if char_cnn_filters is None:  # the released models' filters
            char_cnn_filters = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
        if isinstance(char_cnn_filters, (list, tuple)):
            char_cnn_filters = [list(f) if isinstance(f, (list, tuple)) else f for f in char_cnn_filters]
        self.char_cnn_filters = char_cnn_filters
        self.num_highway_layers = num_highway_layers
        self.char_cnn_activation = char_cnn_activation
        self.max_characters_per_token = max_characters_per_token
        self.num_characters = num_characters
        self.char_vocabulary = char_vocabulary
        self.word_input_vocab_size = word_input_vocab_size
        self.word_input_dim = word_input_dim
        self.hidden_dropout_prob = hidden_dropout_prob
        self.lstm_implementation = lstm_implementation
        self.use_packed_kernels = use_packed_kernels
        self.num_output_representations = num_output_representations
        self.scalar_mix_layer_norm = scalar_mix_layer_norm
        mix = scalar_mix_parameters
        self.scalar_mix_parameters = list(mix) if isinstance(mix, (list, tuple)) else mix
        self.classifier_pooling = classifier_pooling
        self.classifier_dropout = classifier_dropout
        self.freeze_elmo = freeze_elmo
        self.lm_softmax = lm_softmax
        self.num_negative_samples = num_negative_samples
        self.lm_softmax_chunk_size = lm_softmax_chunk_size
        self.initializer_range = initializer_range
        self.unk_token_id = unk_token_id
        ids = {"pad_token_id": pad_token_id, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id}
        self.check_fields({name: ids[name] if name in ids else getattr(self, name) for name in FIELD_RULES})
        self.check_agreement()
        kwargs["auto_map"] = dict(AUTO_MAP)  # this package's classes only: never code from another repository
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)

    @staticmethod
    def check_fields(values: Mapping[str, Any], show: Callable[[Any], str] = reprlib.repr) -> None:
        """`ValueError` naming the first field among ``values`` whose value breaks its rule (`FIELD_RULES`): a value
        that would build a model computing nonsense, or none at all; ``show`` quotes the value."""
        for name, (valid, expected) in FIELD_RULES.items():
            if name in values and not valid(values[name]):
                raise ValueError(f"`{name}` must be {expected} got {show(values[name])}.")

    def check_agreement(self) -> None:
        """`ValueError` for the first pair of fields (each valid on its own) that cannot build a model together."""
        mix, words, chars = self.scalar_mix_parameters, self.word_input_vocab_size, self.num_characters
        layers, widest = self.num_hidden_layers + 1, max(width for width, _ in self.char_cnn_filters)
        unicode = self.char_vocabulary == "unicode"
        for bad, message in (
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
                f"`scalar_mix_parameters` needs one weight per layer ({layers}), got {len(mix or ())}: "
                f"{reprlib.repr(mix)}.",
            ),
            (
                self.lm_softmax == "sampled" and self.num_negative_samples >= self.vocab_size,
                f"`num_negative_samples` ({self.num_negative_samples}) must be smaller than vocab_size "
                f"({self.vocab_size}) for a sampled softmax; use lm_softmax='full' for a small vocabulary.",
            ),
        ):
            if bad:
                raise ValueError(message)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any):  # keyword fields build the config with the dict
        own = {key: kwargs.pop(key) for key in inspect.signature(cls.__init__).parameters.keys() & kwargs.keys()}
        if len({"hidden_size", "projection_dim"} & set(own)) == 1:
            config_dict = {k: v for k, v in config_dict.items() if k not in ("hidden_size", "projection_dim")}
        return super().from_dict({**config_dict, **own}, **kwargs)

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
    def uses_torch_lstm(self) -> bool:  # "auto": where nothing is clipped
        unclipped = self.cell_clip is None and self.proj_clip is None
        return unclipped if self.lstm_implementation == "auto" else self.lstm_implementation == "torch"


__all__ = ["ElmoConfig"]
