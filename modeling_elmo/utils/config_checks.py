"""What the package's tools check in a model configuration before they build anything from it: the hardening against
folders of others (hostile or damaged files) lives here, where the commands read foreign folders.

`ElmoConfig` (shipped with every model) refuses, as it is built, what a user could set that would build a model
computing nonsense: a field value of the wrong type, bound or choice (`ElmoConfig.check_fields`), fields that disagree
(filter widths and characters per word, the character table, the word input, the scalar mix, sampled softmax and
vocabulary; `ElmoConfig.check_agreement`), sizes and an LSTM implementation that disagree. The tools of this package
(``elmo`` commands, `load_elmo_model`, the converters, pretraining's plan, the publisher) read a config through
`load_config` (a model folder or Hub id) or `config_from_dict` (a ``config.json``'s content, a preset, the values of
an original options file), which also refuse, in one line naming the field and the value (quoted by `shown`, bounded
whatever its size):

* keys that would replace a member of the class (``to_dict``, ``__class__``) rather than set a value;
* a ``num_labels`` outside [1, `MAX_LABELS`], label maps that are not objects or whose keys are not label numbers, an
  ``attn_implementation`` naming a Hub kernel repository, the legacy ``stateful: true``;
* a built config's fields changed since into what `ElmoConfig` refuses (`check_config`);
* a model of more than `MAX_PARAMETERS_LIMIT` parameters, computed from the sizes before anything is allocated;

and warn of a key that looks like a misspelt field (``hiden_size``: kept as an attribute, it sets nothing).

Not part of the Hub code files.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import re
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

from ..configuration_elmo import FIELD_RULES, ElmoConfig
from .earlier_formats import upgrade_hint, upgraded_config

logger = logging.getLogger(__name__)

__all__ = [
    "ELMO_FIELDS",
    "MAX_LABELS",
    "MAX_PARAMETERS_LIMIT",
    "check_config",
    "check_keys",
    "check_labels",
    "config_from_dict",
    "implied_num_parameters",
    "load_config",
    "shown",
]

#: The fields of `ElmoConfig` itself (its constructor's arguments).
ELMO_FIELDS = frozenset(inspect.signature(ElmoConfig.__init__).parameters) - {"self", "kwargs"}
#: A model of more parameters than this (40 GB of float32; the largest released model has 94 M) cannot be what a
#: config or options file was meant to describe.
MAX_PARAMETERS_LIMIT = 10**10
#: No classifier has more labels than this (a config's ``num_labels`` gets a label name each).
MAX_LABELS = 10**6


class _BoundedRepr(reprlib.Repr):
    """A repr that formats no more than the start of a value, whatever its size."""

    def repr_int(self, x: int, level: int) -> str:  # Python refuses to format an integer of over 4,300 digits
        return super().repr_int(x, level) if x.bit_length() < 640 else f"<an integer of {x.bit_length():,} bits>"


_BOUNDED_REPR = _BoundedRepr()  # (keyword arguments of Repr need Python 3.12)
_BOUNDED_REPR.maxlevel, _BOUNDED_REPR.maxstring, _BOUNDED_REPR.maxother, _BOUNDED_REPR.maxlong = 4, 200, 200, 200
_BOUNDED_REPR.maxlist = _BOUNDED_REPR.maxtuple = _BOUNDED_REPR.maxdict = _BOUNDED_REPR.maxset = 40


def shown(value: Any) -> str:
    """``repr(value)``, cut to 80 characters: the one way an error line quotes a value of the input (a hostile file
    may hold a value of megabytes, a record of millions of tokens); a value is never formatted beyond its start."""
    text = _BOUNDED_REPR.repr(value)
    return text if len(text) <= 80 else f"{text[:80]}..."


def check_keys(keys: Iterable[str]) -> None:
    """`ValueError` for a key that would replace a member of `ElmoConfig` (``to_dict``, ``__class__``) rather than
    set a value: transformers sets every key of a config dict on the config as it is."""
    settings = {  # a dataclass's fields, or (transformers before 5.4) the constructors' arguments
        *(param for klass in ElmoConfig.__mro__[:-1] for param in inspect.signature(klass.__init__).parameters),
        *(field.name for field in (dataclasses.fields(ElmoConfig) if dataclasses.is_dataclass(ElmoConfig) else ())),
        "model_type",
    }
    for key in keys:
        member = inspect.getattr_static(ElmoConfig, key, None)
        settable = key in settings or (isinstance(member, property) and member.fset is not None)
        if key.startswith("__") or (member is not None and not settable):
            raise ValueError(f"config key {shown(key)} is not a setting: it would replace ElmoConfig.{key[:80]}.")


def check_labels(values: Mapping[str, Any]) -> None:
    """`ValueError` for a ``num_labels`` that is not an integer in [1, `MAX_LABELS`] (transformers builds a label
    name for each: ``"num_labels": 1000000000``, 20 bytes of a config, took gigabytes), an ``id2label`` whose keys
    are not label numbers, and an ``attn_implementation`` naming a Hub kernel repository (``org/name``: transformers
    would fetch and load its code for a model that has no attention)."""
    count = values.get("num_labels")
    if count is not None and not (isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_LABELS):
        raise ValueError(f"`num_labels` must be an integer in [1, {MAX_LABELS:,}], got {shown(count)}.")
    for key in ("attn_implementation", "_attn_implementation", "_attn_implementation_internal"):
        named = values.get(key)
        for name in named.values() if isinstance(named, Mapping) else [named]:
            if isinstance(name, str) and "/" in name:
                raise ValueError(
                    f"`{key}` names the Hub kernel repository {shown(name)}, which transformers would download "
                    "and load; ELMo has no attention: leave it out."
                )
    id2label = values.get("id2label")
    if isinstance(id2label, Mapping):
        if len(id2label) > MAX_LABELS:
            raise ValueError(f"`id2label` names {len(id2label):,} labels; at most {MAX_LABELS:,} are taken.")
        bad = next((key for key in id2label if not re.fullmatch(r"\d{1,7}", str(key))), None)
        if bad is not None:
            raise ValueError(f"`id2label` keys must be label numbers (0, 1, ...), got {shown(bad)}.")


def _check_keys(config_dict: Mapping[str, Any]) -> None:
    """Refuse the keys of a config dict that transformers would set on the config as they are (`check_keys`,
    `check_labels`), label maps that are not objects, a legacy ``stateful: true``, and field values that break their
    rule (quoted by `shown`)."""
    check_keys(config_dict)
    for key in ("id2label", "label2id"):
        if config_dict.get(key) is not None and not isinstance(config_dict[key], dict):
            text = str(config_dict[key])[:80]
            raise ValueError(
                f"`{key}` must be an object mapping labels, got {type(config_dict[key]).__name__} {text!r}."
            )
    if config_dict.get("stateful"):  # earlier versions wrote `false`
        raise ValueError(
            "`stateful=True` is not a configuration field any more: pass the `lstm_state` of one call to the next."
        )
    count = config_dict.get("num_labels", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"`num_labels` must be an integer >= 1, got {shown(count)}.")
    check_labels(config_dict)
    ElmoConfig.check_fields(config_dict, show=shown)


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

    check_labels({"num_labels": config.num_labels, "id2label": config.id2label})
    config.check_fields({name: getattr(config, name) for name in FIELD_RULES}, show=shown)  # changed since built?
    config.check_agreement()
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
    config = ElmoConfig.from_dict(dict(config_dict))  # which refuses values that would compute nonsense
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
    if upgraded_config(config_dict) is not None:
        raise ValueError(
            f"the config.json of {name!r} has no projection_dim (its hidden_size is the projection): "
            f"{upgrade_hint(name)}."
        )
    return config_from_dict(config_dict, source or f"the config.json of {name!r}")
