"""What the package's tools check in a model configuration before they build anything from it.

`ElmoConfig` (shipped with every model) builds what it is given, as transformers' configs do. The tools of this
package (``elmo`` commands, `load_elmo_model`, the converters, pretraining's plan, the publisher) read a config
through `load_config` (a model folder or Hub id) or `config_from_dict` (a ``config.json``'s content, a preset, the
values of an original options file), which refuse, in one line naming the field and the value:

* keys that would replace a member of the class (``to_dict``, ``__class__``), label maps that are not objects, the
  legacy ``stateful: true``, a ``num_labels`` below 1;
* a field value that cannot build a model (`check_config`): types, bounds and choices of single fields, then the
  fields that must agree (filter widths and characters per word, the character table, the word input, the scalar
  mix, sampled softmax and vocabulary; `ElmoConfig` itself refuses sizes and an LSTM implementation that disagree);
* a model of more than `MAX_PARAMETERS_LIMIT` parameters, computed from the sizes before anything is allocated;

and warn of a key that looks like a misspelt field (``hiden_size``: kept as an attribute, it sets nothing).

Not part of the Hub code files.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..configuration_elmo import MAX_CHARACTERS_PER_TOKEN_LIMIT, ElmoConfig

logger = logging.getLogger(__name__)

__all__ = [
    "ELMO_FIELDS",
    "MAX_PARAMETERS_LIMIT",
    "check_config",
    "config_from_dict",
    "implied_num_parameters",
    "load_config",
]

#: The fields of `ElmoConfig` itself (its constructor's arguments).
ELMO_FIELDS = frozenset(inspect.signature(ElmoConfig.__init__).parameters) - {"self", "kwargs"}
#: A model of more parameters than this (40 GB of float32; the largest released model has 94 M) cannot be what a
#: config or options file was meant to describe.
MAX_PARAMETERS_LIMIT = 10**10


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """``repr(value)``, cut to a few dozen characters (a hostile file may hold a value of megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}..."


def _filters_valid(filters: Any) -> bool:
    return (
        isinstance(filters, list)
        and bool(filters)
        and all(isinstance(p, list) and len(p) == 2 and all(_is_int(v) and v >= 1 for v in p) for p in filters)
    )


_INTEGER_MINIMUMS = dict(
    vocab_size=4,
    projection_dim=1,
    hidden_size=2,
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
#: Field -> (whether a value is valid, what the field must be): the checks of single fields, in order.
_FIELD_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{
        n: (lambda v, low=low: _is_int(v) and v >= low, f"an integer >= {low},") for n, low in _INTEGER_MINIMUMS.items()
    },
    **{n: (lambda v, ok=ok: v in ok, f"one of {', '.join(map(repr, ok))};") for n, ok in _CHOICES.items()},
    **dict.fromkeys(
        ("use_skip_connections", "scalar_mix_layer_norm", "freeze_elmo"),
        (lambda v: isinstance(v, bool), "true or false,"),
    ),
    **dict.fromkeys(
        ("hidden_dropout_prob", "classifier_dropout"),
        (lambda v: _is_number(v) and 0.0 <= v < 1.0, "a probability in [0, 1),"),
    ),
    **dict.fromkeys(
        ("cell_clip", "proj_clip"),
        (
            lambda v: v is None or (_is_number(v) and math.isfinite(v) and v > 0),
            "a finite positive number or None (no clipping),",
        ),
    ),
    "char_cnn_filters": (_filters_valid, "a non-empty list of [width, count] pairs of positive integers,"),
    "scalar_mix_parameters": (
        lambda v: v is None or (isinstance(v, list) and all(_is_number(w) for w in v)),
        "a list of numbers (one weight per layer) or None,",
    ),
}


def _check_fields(values: Mapping[str, Any]) -> None:
    """Raise a `ValueError` naming the first field among ``values`` whose value breaks its rule."""
    for name, (valid, expected) in _FIELD_RULES.items():
        if name in values and not valid(values[name]):
            raise ValueError(f"`{name}` must be {expected} got {_shown(values[name])}.")


def _check_keys(config_dict: Mapping[str, Any]) -> None:
    """Refuse the keys of a config dict that transformers would set on the config as they are: keys replacing a
    member of the class, label maps that are not objects, a legacy ``stateful: true``, a ``num_labels`` below 1."""
    # transformers declares PretrainedConfig's settings as dataclass fields from 5.4 on; before, they are instance
    # attributes set in __init__, which getattr_static does not find on the class
    fields = dataclasses.fields(ElmoConfig) if dataclasses.is_dataclass(ElmoConfig) else ()
    settings = {field.name for field in fields} | {"model_type"} | ELMO_FIELDS
    for key in config_dict:
        member = inspect.getattr_static(ElmoConfig, key, None)
        settable = key in settings or (isinstance(member, property) and member.fset is not None)
        if key.startswith("__") or (member is not None and not settable):
            raise ValueError(f"config key {key!r} is not a setting: it would replace ElmoConfig.{key}.")
    for key in ("id2label", "label2id"):
        if config_dict.get(key) is not None and not isinstance(config_dict[key], dict):
            shown = str(config_dict[key])[:80]
            raise ValueError(
                f"`{key}` must be an object mapping labels, got {type(config_dict[key]).__name__} {shown!r}."
            )
    if config_dict.get("stateful"):  # earlier versions wrote `false`
        raise ValueError(
            "`stateful=True` is not a configuration field any more: pass the `lstm_state` of one call to the next."
        )
    if not _is_int(count := config_dict.get("num_labels", 1)) or count < 1:
        raise ValueError(f"`num_labels` must be an integer >= 1, got {_shown(count)}.")


def _check_agreement(config: ElmoConfig) -> None:
    """Raise a `ValueError` for the first pair of fields that cannot build a model together."""
    mix, words, chars = config.scalar_mix_parameters, config.word_input_vocab_size, config.num_characters
    layers, widest = config.num_hidden_layers + 1, max(width for width, _ in config.char_cnn_filters)
    unicode = config.char_vocabulary == "unicode"
    for bad, message in (
        (
            config.max_characters_per_token > MAX_CHARACTERS_PER_TOKEN_LIMIT,
            f"`max_characters_per_token` must be at most {MAX_CHARACTERS_PER_TOKEN_LIMIT} (characters per word), "
            f"got {config.max_characters_per_token}.",
        ),
        (
            widest > config.max_characters_per_token,
            f"a char_cnn filter of width {widest} is wider than max_characters_per_token="
            f"{config.max_characters_per_token}.",
        ),
        (
            not unicode and chars != 262,
            f"`num_characters` must be 262 (256 bytes + 5 markers + the padding id 0), got {chars!r}.",
        ),
        (unicode and chars < 7, f"`num_characters` must be an integer >= 7, got {chars!r}."),
        (
            words and (words < 4 or not config.word_input_dim),
            "a word input needs word_input_vocab_size >= 4 (the special words come first) and word_input_dim "
            f">= 1, got {words} and {config.word_input_dim}.",
        ),
        (
            mix is not None and len(mix) != layers,
            f"`scalar_mix_parameters` needs one weight per layer ({layers}), got {len(mix or ())}: {_shown(mix)}.",
        ),
        (
            config.lm_softmax == "sampled" and config.num_negative_samples >= config.vocab_size,
            f"`num_negative_samples` ({config.num_negative_samples}) must be smaller than vocab_size "
            f"({config.vocab_size}) for a sampled softmax; use lm_softmax='full' for a small vocabulary.",
        ),
    ):
        if bad:
            raise ValueError(message)


def implied_num_parameters(config: ElmoConfig) -> int:
    """How many parameters the model an `ElmoConfig` describes has (the language model's softmax included),
    computed from the sizes alone: nothing is allocated."""
    d_c, F, P, H = config.char_embedding_dim, config.num_char_cnn_filters, config.projection_dim, config.cell_size
    characters = config.num_characters * d_c + sum(w * d_c * n + n for w, n in config.char_cnn_filters)
    highways = config.num_highway_layers * 2 * (F * F + F)
    lstms = 2 * config.num_hidden_layers * (8 * H * P + 4 * H + H * P)
    words = config.word_input_vocab_size * config.word_input_dim if config.word_input_vocab_size else 0
    return characters + words + highways + config.token_features_size * P + P + lstms + config.vocab_size * (P + 1)


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
    """The field ``key`` is most likely a misspelling of: at most 2 edits away (1 for names of up to 6 characters),
    or the same words in another order; `None` when no field is that close."""
    allowed = 1 if len(key) <= 6 else 2
    best = min(fields, key=lambda name: (_edit_distance(key.lower(), name), name))
    if _edit_distance(key.lower(), best) <= allowed:
        return best
    words = sorted(key.lower().split("_"))
    return next((name for name in fields if sorted(name.split("_")) == words), None)


def check_config(config: ElmoConfig, source: str = "the config") -> None:
    """Raise a one-line `ValueError` when ``config`` cannot build a model: the first field whose value breaks its
    rule, the first pair of fields that disagree, or more than `MAX_PARAMETERS_LIMIT` parameters; log a warning for
    each key that is no field but is close to one (``hiden_size``: it is kept as an attribute and sets nothing)."""
    from transformers import PretrainedConfig

    _check_fields({name: getattr(config, name) for name in _FIELD_RULES})
    _check_agreement(config)
    implied = implied_num_parameters(config)
    if implied > MAX_PARAMETERS_LIMIT:
        raise ValueError(
            f"{source} describes a model of {implied:.3g} parameters (char_cnn_filters: "
            f"{config.num_char_cnn_filters:,} filters, projection_dim {config.projection_dim}, cell_size "
            f"{config.cell_size}, vocab_size {config.vocab_size}), more than the "
            f"{MAX_PARAMETERS_LIMIT:.0e} this package builds; the file is damaged or not meant for it."
        )
    fields = sorted(ELMO_FIELDS)
    known = set(PretrainedConfig().to_dict()) | ELMO_FIELDS
    for key in sorted(set(config.to_dict()) - known):
        close = None if key.startswith("_") else _close_field(key, fields)
        if close is not None:
            logger.warning(
                f"{source} has the unknown field {key!r}: did you mean {close!r}? It is kept as an "
                f"attribute and does not set {close!r}."
            )


def config_from_dict(config_dict: Mapping[str, Any], source: str = "the config") -> ElmoConfig:
    """The `ElmoConfig` of a config dict (a ``config.json``'s content, a preset, converted options), its keys and
    values checked before it is built and the config after (`check_config`); raises a one-line `ValueError`."""
    _check_keys(config_dict)
    _check_fields(ElmoConfig.upgraded_dict(dict(config_dict)))
    config = ElmoConfig.from_dict(dict(config_dict))
    check_config(config, source)
    return config


def load_config(location: str | os.PathLike, source: str | None = None, **hub_kwargs: Any) -> ElmoConfig:
    """The checked `ElmoConfig` (`config_from_dict`) of the ``config.json`` in a model folder or Hub repository
    (``hub_kwargs``: ``revision``, ``cache_dir``, ``token``...). Refuses a folder without ``config.json`` and a
    config of another model type; transformers' own errors (a Hub id that cannot be fetched: `OSError`) pass."""
    name = os.fspath(location)
    try:
        config_dict, _ = ElmoConfig.get_config_dict(name, **hub_kwargs)
    except RecursionError as error:  # nested deeper than the JSON reader follows
        raise ValueError(f"the config.json of {name!r} is not valid JSON: {error}.") from None
    if not config_dict:
        raise ValueError(f"{name!r} holds no config.json: it is not a saved model.")
    if (found := config_dict.get("model_type", ElmoConfig.model_type)) != ElmoConfig.model_type:
        raise ValueError(
            f"{name!r} holds a {found!r} model, not an ELMo model (model_type {found!r} instead of 'elmo')."
        )
    return config_from_dict(config_dict, source or f"the config.json of {name!r}")
