"""ELMo model configuration.

The fields mirror the two blocks of the original ``options.json`` (``lstm.*`` and ``char_cnn.*``) one to
one, plus what a transformers model needs on top: the word vocabulary of the language-model softmax,
dropout, the scalar mix and the task heads. ``ElmoConfig.from_options`` / ``to_options`` convert to and
from the original dict.

This file is shipped to the Hub as custom code: it imports only transformers.
"""

from __future__ import annotations

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


#: Bounds on what a config may declare, checked before anything is allocated: a word of more than this many
#: characters is no word (the released models read 50), and a model of more parameters than this (40 GB of float32;
#: the largest released model has 94 M) cannot be what a config file was meant to describe.
MAX_CHARACTERS_PER_TOKEN_LIMIT = 1024
MAX_PARAMETERS_LIMIT = 10**10

CHAR_CNN_ACTIVATIONS = ("relu", "tanh")
LSTM_IMPLEMENTATIONS = ("auto", "loop", "fused", "torch")
CLASSIFIER_POOLINGS = ("mean", "max", "mean_max", "first", "last")
LM_SOFTMAX_KINDS = ("full", "sampled")


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, with a swap of two neighbouring characters counted as one edit."""
    previous2, previous = None, list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if previous2 is not None and i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1]


def _close_field(key: str, fields: list[str]) -> str | None:
    """The ELMo field ``key`` is most likely a misspelling of: at most 2 edits away (1 for names of up to 6
    characters), or the same words in another order; `None` when no field is that close."""
    allowed = 1 if len(key) <= 6 else 2
    best = min(fields, key=lambda name: (_edit_distance(key.lower(), name), name))
    if _edit_distance(key.lower(), best) <= allowed:
        return best
    words = sorted(key.lower().split("_"))
    return next((name for name in fields if sorted(name.split("_")) == words), None)


def _check_inherited_kwargs(kwargs: dict[str, Any]) -> None:
    """Refuse the retired ``stateful=True``; warn about keys that look like a misspelt ELMo field.

    Any other key neither ElmoConfig nor this transformers release knows is kept as an attribute, as transformers
    keeps it: a config written by a newer release (or with a user's own key) loads, and is saved back with it."""
    if kwargs.get("stateful"):
        raise ValueError(
            "`stateful=True` is not a configuration field any more: pass the `lstm_state` of one call to the next "
            "(`ElmoModel(...)(..., lstm_state=previous.lstm_state)`) to carry LSTM states between batches."
        )
    kwargs.pop("stateful", None)  # written as false by earlier versions; stateless is the only configured mode
    if "num_labels" in kwargs:
        count = kwargs["num_labels"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"`num_labels` must be an integer >= 1, got {count!r}.")
    own = sorted(set(inspect.signature(ElmoConfig.__init__).parameters) - {"self", "kwargs"})
    for key in kwargs:
        if key.startswith("_") or key in own:
            continue
        close = _close_field(key, own)
        if close is not None:
            logger.warning(f"ElmoConfig got the unknown field {key!r}: did you mean {close!r}? It is kept as an "
                           f"attribute and does not set {close!r}.")


class ElmoConfig(PretrainedConfig):
    r"""Configuration of an ELMo bidirectional language model and its task heads.

    The defaults build the original released model ``2x4096_512_2048cnn_2xhighway`` (93.6 M parameters
    without the softmax). Each field names the ``options.json`` key it mirrors, where there is one.

    Args:
        vocab_size (`int`, *optional*, defaults to 4):
            Size of the word vocabulary of the language-model softmax (``n_tokens_vocab``), counting the four
            special words ``<pad>`` (0), ``<S>`` (1), ``</S>`` (2) and ``<UNK>`` (3). The default 4 means the
            model has no real word vocabulary (a feature extractor such as a converted release).
        hidden_size (`int`, *optional*, defaults to 512):
            Projection size P (``lstm.projection_dim``): the token-embedding size, the LSTM input and output
            size. Every output layer has size ``2 * hidden_size`` (forward and backward concatenated).
        cell_size (`int`, *optional*, defaults to 4096):
            LSTM memory-cell size H (``lstm.dim``).
        num_hidden_layers (`int`, *optional*, defaults to 2):
            LSTM layers per direction (``lstm.n_layers``).
        cell_clip (`float` or `None`, *optional*, defaults to 3.0):
            The cell state is clipped to ``[-cell_clip, cell_clip]`` before its ``tanh`` (``lstm.cell_clip``).
            `None` turns clipping off.
        proj_clip (`float` or `None`, *optional*, defaults to 3.0):
            The projected output is clipped to ``[-proj_clip, proj_clip]`` (``lstm.proj_clip``). `None` turns
            clipping off.
        use_skip_connections (`bool`, *optional*, defaults to `True`):
            Residual connection from a layer's input to its output for layers 1 and up
            (``lstm.use_skip_connections``).
        char_embedding_dim (`int`, *optional*, defaults to 16):
            Size of the character embedding (``char_cnn.embedding.dim``).
        char_cnn_filters (`list[list[int]]`, *optional*):
            ``[width, num_filters]`` per convolution (``char_cnn.filters``); defaults to the released models'
            seven widths with 2048 filters in all.
        num_highway_layers (`int`, *optional*, defaults to 2):
            Highway layers after the convolutions (``char_cnn.n_highway``).
        char_cnn_activation (`str`, *optional*, defaults to `"relu"`):
            Activation after max-pooling, `"relu"` or `"tanh"` (``char_cnn.activation``).
        max_characters_per_token (`int`, *optional*, defaults to 50):
            Character slots per token, begin/end-of-word included (``char_cnn.max_characters_per_token``).
        num_characters (`int`, *optional*, defaults to 262):
            Rows of the character table (``char_cnn.n_characters``). With ``char_vocabulary="bytes"`` always 262:
            256 bytes, 5 markers and the padding id 0. With ``"unicode"``: 7 reserved rows (absent token, padding,
            word and sentence markers, unknown character) plus one per character of the tokenizer's vocabulary.
        char_vocabulary (`str`, *optional*, defaults to `"bytes"`):
            What a character id means. `"bytes"`: the UTF-8 bytes of a word, the fixed table of the released
            English models. `"unicode"`: code points looked up in the character vocabulary saved with the tokenizer
            (``char_vocab.json``), so a word of any script keeps ``max_characters_per_token - 2`` characters.
        word_input_vocab_size (`int`, *optional*, defaults to 0):
            Rows of an optional word-embedding input (0: none, the default). When set, every token also gets the
            vector of its word (``word_input_ids`` from the tokenizer's ``word_input_vocab.json``; unknown words
            use row 3, ``<UNK>``), concatenated *before* the character features and projected with them, as
            ELMoForManyLangs does.
        word_input_dim (`int`, *optional*, defaults to 0):
            Size of those word vectors (needed when ``word_input_vocab_size`` is set).
        hidden_dropout_prob (`float`, *optional*, defaults to 0.1):
            Dropout on the input of every LSTM layer and on the top layer before the softmax, as in the
            original training (``dropout``). Active only in training mode.
        lstm_implementation (`str`, *optional*, defaults to `"auto"`):
            How the LSTM stacks run; all give the same numbers with the same parameters. `"loop"`: the explicit
            time loop of `ElmoLstmLayer.forward` (the readable reference); `"fused"`: the same recurrence with both
            directions advanced together, an explicit backward pass and, on a GPU, compiled steps
            (`ElmoBiLstm.fused_forward`); `"torch"`: `torch.nn.LSTM(proj_size=...)` (cuDNN on a GPU), only valid
            when both clips are off; `"auto"`: `"torch"` when both clips are off and no state is carried, else
            `"fused"`, falling back to `"loop"` (with one logged line) where the fused form cannot run.
        num_output_representations (`int`, *optional*, defaults to 1):
            Number of independent scalar mixes a head computes (the paper uses 2 for some tasks).
        scalar_mix_layer_norm (`bool`, *optional*, defaults to `False`):
            Normalise every layer (masked, one mean and variance per layer) before mixing.
        scalar_mix_parameters (`list[float]` or `None`, *optional*):
            Fixed pre-softmax layer weights (e.g. ``[-9e10, 1, -9e10]`` selects layer 1); weights and gamma
            are then not trained.
        classifier_pooling (`str`, *optional*, defaults to `"mean"`):
            How `ElmoForSequenceClassification` pools tokens: `"mean"`, `"max"`, `"mean_max"`, `"first"`,
            `"last"`.
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout on the mixed representation before a head's linear layer.
        freeze_elmo (`bool`, *optional*, defaults to `True`):
            The task heads keep the biLM frozen (no gradient, always in eval mode). Set `False` to fine-tune.
        lm_softmax (`str`, *optional*, defaults to `"full"`):
            Training loss of `ElmoForBidirectionalLM`: `"full"` softmax or `"sampled"` softmax (evaluation
            always uses the exact full softmax).
        num_negative_samples (`int`, *optional*, defaults to 8192):
            Negatives per batch of the sampled softmax (``n_negative_samples_batch``).
        lm_softmax_chunk_size (`int`, *optional*, defaults to 32768):
            The exact full softmax is computed over this many words at a time, which bounds its memory.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Kept for transformers' conventions; the ELMo initialisation is described in `_init_weights`.

    Example:

    ```python
    >>> from modeling_elmo import ElmoConfig, ElmoModel
    >>> config = ElmoConfig(hidden_size=16, cell_size=64, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1)
    >>> model = ElmoModel(config)
    >>> config.output_size
    32
    ```
    """

    model_type = "elmo"

    def __init__(
        self,
        vocab_size: int = 4,
        hidden_size: int = 512,
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
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
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
        _check_inherited_kwargs(kwargs)
        kwargs["auto_map"] = own_auto_map(kwargs.get("auto_map"))
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self.validate_elmo()

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
    def output_size(self) -> int:
        """Width of every output layer: forward and backward halves concatenated (2P)."""
        return 2 * self.hidden_size

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

    def implied_num_parameters(self) -> int:
        """How many parameters the model this config describes would have (the language model's softmax
        included), computed from the sizes alone: nothing is allocated."""
        d_c, F, P, H = self.char_embedding_dim, self.num_char_cnn_filters, self.hidden_size, self.cell_size
        characters = self.num_characters * d_c + sum(w * d_c * n + n for w, n in self.char_cnn_filters)
        highways = self.num_highway_layers * 2 * (F * F + F)
        lstms = 2 * self.num_hidden_layers * (8 * H * P + 4 * H + H * P)
        words = self.word_input_vocab_size * self.word_input_dim if self.word_input_vocab_size else 0
        return characters + words + highways + self.token_features_size * P + P + lstms + self.vocab_size * (P + 1)

    # ------------------------------------------------------------------ validation
    def validate_elmo(self) -> None:
        """Raise a `ValueError` naming the first field whose value cannot build a model."""

        def positive_int(name: str, minimum: int = 1) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")

        def fraction(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be a probability in [0, 1), got {value!r}.")

        def choice(name: str, allowed: tuple[str, ...]) -> None:
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"`{name}` must be one of {', '.join(map(repr, allowed))}; got {value!r}.")

        def boolean(name: str) -> None:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be true or false, got {getattr(self, name)!r}.")

        positive_int("vocab_size", minimum=4)
        for name in ("hidden_size", "cell_size", "num_hidden_layers", "char_embedding_dim",
                     "num_output_representations"):
            positive_int(name)
        positive_int("num_highway_layers", minimum=0)
        positive_int("num_negative_samples")
        positive_int("lm_softmax_chunk_size")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"`{name}` must be a finite positive number or None (no clipping), got {value!r}.")
        for name in ("use_skip_connections", "scalar_mix_layer_norm", "freeze_elmo"):
            boolean(name)
        fraction("hidden_dropout_prob")
        fraction("classifier_dropout")
        choice("char_cnn_activation", CHAR_CNN_ACTIVATIONS)
        choice("lstm_implementation", LSTM_IMPLEMENTATIONS)
        choice("classifier_pooling", CLASSIFIER_POOLINGS)
        choice("lm_softmax", LM_SOFTMAX_KINDS)
        if self.lstm_implementation == "torch" and (self.cell_clip is not None or self.proj_clip is not None):
            raise ValueError(
                "`lstm_implementation='torch'` cannot clip (torch.nn.LSTM has no clipping), but "
                f"cell_clip={self.cell_clip!r} and proj_clip={self.proj_clip!r}; set both to None or use 'loop'."
            )
        if not isinstance(self.char_cnn_filters, list) or not self.char_cnn_filters:
            raise ValueError(f"`char_cnn_filters` must be a non-empty list of [width, count] pairs, got {self.char_cnn_filters!r}.")
        for pair in self.char_cnn_filters:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in pair)
            ):
                raise ValueError(f"every `char_cnn_filters` entry must be [width, count] with positive integers, got {pair!r}.")
        positive_int("max_characters_per_token", minimum=3)
        if self.max_characters_per_token > MAX_CHARACTERS_PER_TOKEN_LIMIT:
            raise ValueError(f"`max_characters_per_token` must be at most {MAX_CHARACTERS_PER_TOKEN_LIMIT} (characters "
                             f"per word), got {self.max_characters_per_token}.")
        implied = self.implied_num_parameters()
        if implied > MAX_PARAMETERS_LIMIT:
            raise ValueError(f"this config describes a model of {implied:.3g} parameters (char_cnn_filters: "
                             f"{self.num_char_cnn_filters:,} filters, hidden_size {self.hidden_size}, cell_size "
                             f"{self.cell_size}, vocab_size {self.vocab_size}), more than the {MAX_PARAMETERS_LIMIT:.0e} "
                             "this package builds; the file is damaged or not meant for it.")
        widest = max(width for width, _ in self.char_cnn_filters)
        if widest > self.max_characters_per_token:
            raise ValueError(
                f"a char_cnn filter of width {widest} is wider than max_characters_per_token="
                f"{self.max_characters_per_token}."
            )
        choice("char_vocabulary", CHAR_VOCABULARIES)
        if self.char_vocabulary == "bytes" and self.num_characters != 262:
            raise ValueError(
                f"`num_characters` must be 262 (256 bytes + 5 markers + the padding id 0), got {self.num_characters!r}."
            )
        if self.char_vocabulary == "unicode":
            positive_int("num_characters", minimum=UNICODE_FIRST_CHARACTER)
        positive_int("word_input_vocab_size", minimum=0)
        positive_int("word_input_dim", minimum=0)
        if self.word_input_vocab_size:
            positive_int("word_input_vocab_size", minimum=4)  # the four special words come first
            if not self.word_input_dim:
                raise ValueError(f"`word_input_dim` must be >= 1 with word_input_vocab_size={self.word_input_vocab_size}.")
        if self.scalar_mix_parameters is not None and len(self.scalar_mix_parameters) != self.num_representation_layers:
            raise ValueError(
                f"`scalar_mix_parameters` needs one weight per layer ({self.num_representation_layers}), "
                f"got {len(self.scalar_mix_parameters)}: {self.scalar_mix_parameters!r}."
            )
        if self.lm_softmax == "sampled" and self.num_negative_samples >= self.vocab_size:
            raise ValueError(
                f"`num_negative_samples` ({self.num_negative_samples}) must be smaller than vocab_size "
                f"({self.vocab_size}) for a sampled softmax; use lm_softmax='full' for a small vocabulary."
            )

    # ------------------------------------------------------------------ options.json
    @classmethod
    def from_options(cls, options: dict[str, Any], **kwargs: Any) -> "ElmoConfig":
        """Build a config from an original ``options.json`` dict (inference or training form).

        Unknown keys raise a `ValueError` that names them; ``n_characters`` 261 (a training file) is accepted
        and stored as 262, the inference table size.
        """
        if not isinstance(options, dict) or "lstm" not in options:
            raise ValueError(f"options.json must be an object with an 'lstm' block, got keys {sorted(options) if isinstance(options, dict) else type(options).__name__}.")
        known_top = {"lstm", "char_cnn", "bidirectional", "dropout", "all_clip_norm_val", "n_epochs",
                     "n_train_tokens", "batch_size", "n_tokens_vocab", "unroll_steps",
                     "n_negative_samples_batch", "learning_rate", "sample_softmax",
                     "share_embedding_softmax", "reverse"}
        known_lstm = {"dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections"}
        known_cnn = {"activation", "embedding", "filters", "max_characters_per_token", "n_characters",
                     "n_highway", "projection_after_highway"}
        lstm, cnn = options["lstm"], options.get("char_cnn")
        if cnn is None:
            raise ValueError("options.json has no 'char_cnn' block: word-input ELMo models are not supported.")
        for block, keys, name in ((options, known_top, "top level"), (lstm, known_lstm, "lstm"), (cnn, known_cnn, "char_cnn")):
            unknown = sorted(set(block) - keys)
            if unknown:
                raise ValueError(f"options.json has unknown keys in {name}: {unknown}.")
        for key in ("dim", "projection_dim", "n_layers"):
            if key not in lstm:
                raise ValueError(f"options.json is missing lstm.{key}.")
        for key in ("activation", "embedding", "filters", "max_characters_per_token"):
            if key not in cnn:
                raise ValueError(f"options.json is missing char_cnn.{key}.")
        n_characters = cnn.get("n_characters", 262)
        if n_characters not in (261, 262):
            raise ValueError(f"char_cnn.n_characters must be 261 (training) or 262 (inference), got {n_characters!r}.")
        values = dict(
            hidden_size=lstm["projection_dim"],
            cell_size=lstm["dim"],
            num_hidden_layers=lstm["n_layers"],
            cell_clip=lstm.get("cell_clip") or None,
            proj_clip=lstm.get("proj_clip") or None,
            use_skip_connections=bool(lstm.get("use_skip_connections", False)),
            char_embedding_dim=cnn["embedding"]["dim"],
            char_cnn_filters=[list(f) for f in cnn["filters"]],
            num_highway_layers=cnn.get("n_highway") or 0,
            char_cnn_activation=cnn["activation"],
            max_characters_per_token=cnn["max_characters_per_token"],
            num_characters=262,
        )
        if "dropout" in options:
            values["hidden_dropout_prob"] = options["dropout"]
        if "n_tokens_vocab" in options:
            values["vocab_size"] = options["n_tokens_vocab"]
        values.update(kwargs)
        return cls(**values)

    def to_options(self) -> dict[str, Any]:
        """The inference ``options.json`` dict of this configuration (as the released models have it)."""
        return {
            "lstm": {
                "dim": self.cell_size,
                "projection_dim": self.hidden_size,
                "n_layers": self.num_hidden_layers,
                "use_skip_connections": self.use_skip_connections,
                # A clip that is off is left out: bilm-tf would clip to [0, 0] on a stored 0.
                **({"cell_clip": self.cell_clip} if self.cell_clip is not None else {}),
                **({"proj_clip": self.proj_clip} if self.proj_clip is not None else {}),
            },
            "char_cnn": {
                "activation": self.char_cnn_activation,
                "embedding": {"dim": self.char_embedding_dim},
                "filters": [list(f) for f in self.char_cnn_filters],
                "max_characters_per_token": self.max_characters_per_token,
                "n_characters": 262,
                "n_highway": self.num_highway_layers,
            },
        }


__all__ = ["AUTO_MAP", "CHAR_VOCABULARIES", "ElmoConfig", "own_auto_map", "sentence_boundary_char_ids"]
