"""Parsing ``elmo pretrain``'s command line: ``[--config RECIPE] [flags]`` into a checked `PretrainingArguments`.

Every field of `PretrainingArguments` (`modeling_elmo.pretraining.options`) is a flag (``--train-file``, or
``--train_file``) and a recipe key (``train_file`` or ``train-file``, `modeling_elmo.pretraining.recipes`); recipe
values become defaults, flags override them, and a data source on the command line replaces the recipe's.

The parser is argparse built from the dataclass's fields here, not transformers' `HfArgumentParser`, which builds the
same kind of parser from a dataclass and reads YAML (`parse_yaml_file`), because the command promises what that
parser does not do: one error line and no usage block (``elmo pretrain: error: ...``) with a suggestion for a
mistyped or abbreviated flag; ``--help`` in the dataclass's groups with the real defaults; a recipe as the defaults
under the flags (`HfArgumentParser` reads either the YAML or the command line) with the data sources replaced as a
whole; ``null``/``none`` switching off a value a recipe set; and recipe files read without YAML aliases, within a
size bound, with one line naming the recipe, the key and the expected kind (`yaml.safe_load` expands aliases, and an
unknown key there is a list, not the recipe's name).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from typing import Any

from ..utils.io_utils import error_line
from .options import (
    _DEFAULTS,
    ARGUMENT_NAMES,
    BUDGET_SCHEDULES,
    DATA_SOURCE_FIELDS,
    DEFAULT_LEARNING_RATES,
    LENGTH_FREE_SCHEDULES,
    OPTION_GROUPS,
    VALID_CHOICES,
    PretrainingArguments,
    flag,
    snapshot_minutes,
    validate,
)
from .recipes import (
    BUILTIN_PREFIX,
    BUILTIN_SPLITS,
    MAX_RECIPE_BYTES,
    builtin_corpus_file,
    configuration_files,
    load_recipe,
    preset_names,
    read_model_preset,
    recipe_names,
    recipe_path,
)

__all__ = [
    "ARGUMENT_NAMES",
    "BUDGET_SCHEDULES",
    "BUILTIN_PREFIX",
    "BUILTIN_SPLITS",
    "DATA_SOURCE_FIELDS",
    "DEFAULT_LEARNING_RATES",
    "LENGTH_FREE_SCHEDULES",
    "MAX_RECIPE_BYTES",
    "OPTION_GROUPS",
    "VALID_CHOICES",
    "PretrainingArguments",
    "build_parser",
    "builtin_corpus_file",
    "configuration_files",
    "flag",
    "load_recipe",
    "parse_args",
    "preset_names",
    "read_model_preset",
    "recipe_names",
    "recipe_path",
    "snapshot_minutes",
    "validate",
]


def _one_line_error(message: str) -> None:
    print(f"elmo pretrain: error: {error_line(message)} (`elmo pretrain --help` lists the options).", file=sys.stderr)
    raise SystemExit(2)


def _to_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _optional(kind: type) -> Any:
    """``kind``, or ``None`` for ``null``/``none`` (switching off a value a recipe set)."""

    def convert(value: str) -> Any:
        return None if value.strip().lower() in ("null", "none") else kind(value)

    convert.__name__ = kind.__name__  # argparse names the type in "invalid int value: 'abc'"
    return convert


class _Parser(argparse.ArgumentParser):
    """One error line (no fifty-line usage first), and a suggestion for a mistyped flag."""

    def error(self, message: str) -> None:  # type: ignore[override]
        _one_line_error(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``elmo pretrain`` parser: the fields of `PretrainingArguments` in the groups of `OPTION_GROUPS`, with
    dash spellings, their real defaults, and no abbreviations."""
    parser = _Parser(
        prog="elmo pretrain",
        allow_abbrev=False,
        usage="elmo pretrain [--config RECIPE] [options]",
        description="Pretrain an ELMo biLM on your text (one process as it is; several processes or machines under "
        "`accelerate launch`). Flags override the values of a --config recipe. See docs/pretraining.md.",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=34, width=110),
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="RECIPE",
        help=f"A YAML recipe: a file, or a packaged recipe name ({', '.join(recipe_names())}); flags override it.",
    )
    fields = {f.name: f for f in dataclasses.fields(PretrainingArguments)}
    for title, names in OPTION_GROUPS.items():
        group = parser.add_argument_group(title)
        for name in names:
            spec, default = fields[name], _DEFAULTS[name]
            annotation, meta = str(spec.type), dict(spec.metadata)
            help_text, metavar = meta.pop("help"), meta.pop("metavar", None)
            meta.pop("group", None)
            if "bool" in annotation:
                if default:
                    help_text += f" (default: on; {flag('no_' + name)} turns it off)"
                group.add_argument(
                    flag(name), dest=name, nargs="?", const=True, type=_to_bool, metavar="true|false", help=help_text
                )
                if default:
                    group.add_argument(flag("no_" + name), dest=name, action="store_false", help=argparse.SUPPRESS)
                continue
            kind = int if annotation.startswith("int") else float if annotation.startswith("float") else str
            if default is not None:
                help_text += f" (default: {default:g})" if isinstance(default, float) else f" (default: {default})"
            if name in VALID_CHOICES:
                metavar = "{" + ",".join(c for c in VALID_CHOICES[name] if c) + "}"
            else:
                metavar = metavar or (name.upper().split("_")[-1] if kind is str else "N" if kind is int else "X")
            convert = _optional(kind) if "None" in annotation and kind is not str else kind
            group.add_argument(flag(name), dest=name, type=convert, metavar=metavar, help=help_text, **meta)
    parser.set_defaults(**_DEFAULTS)
    return parser


def _dash_spellings(argv: list[str]) -> list[str]:
    """``--train_file`` -> ``--train-file`` for the known options (values and anything after ``--`` untouched)."""
    known = {"--" + name for name in ARGUMENT_NAMES} | {"--no_" + name for name in ARGUMENT_NAMES}
    out = []
    for position, token in enumerate(argv):
        if token == "--":
            return out + argv[position:]
        option, equals, value = token.partition("=")
        out.append(option.replace("_", "-") + equals + value if option in known else token)
    return out


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        first = unknown[0]
        if first.startswith("-"):
            options = sorted({o for action in parser._actions for o in action.option_strings if o.startswith("--")})
            typed = first.partition("=")[0]
            extensions = [o for o in options if o.startswith(typed)]  # an abbreviation: never taken, but named
            close = (
                extensions[:1] if len(extensions) == 1 else difflib.get_close_matches(typed, options, n=1, cutoff=0.75)
            )
            hint = f"; did you mean {close[0]}?" if close else ""
            _one_line_error(f"unknown option {first}{hint}")
        _one_line_error(f"unexpected argument {first!r}")
    return namespace


def parse_args(argv: list[str] | None = None) -> PretrainingArguments:
    """Parse ``[--config recipe] [flags]``: recipe values become defaults, flags override them, and a data source
    on the command line replaces the recipe's data sources."""
    argv = _dash_spellings(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    pre = _parse(parser, argv)
    if pre.config:
        recipe = load_recipe(pre.config)
        given = {k for k in DATA_SOURCE_FIELDS if getattr(pre, k) != _DEFAULTS[k]}
        if given:  # the recipe's data licence is that of the recipe's data: it goes with it
            recipe = {k: v for k, v in recipe.items() if k not in (*DATA_SOURCE_FIELDS, "data_license")}
        parser.set_defaults(**recipe)
    namespace = _parse(parser, argv)
    values = {k: v for k, v in vars(namespace).items() if k in ARGUMENT_NAMES}
    for name, value in values.items():
        # `--dataset-name null` (or none / an empty string) switches off an option set by a recipe
        if isinstance(value, str) and value.strip().lower() in ("null", "none", "") and _DEFAULTS[name] is None:
            values[name] = None
    args = PretrainingArguments(**values)
    validate(args)
    return args
