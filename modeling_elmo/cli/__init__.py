"""The ``elmo`` command: one entry point for every tool of the package.

    elmo pretrain  ...   pretrain a biLM (run it under `accelerate launch` for several processes)
    elmo convert   ...   convert the original options.json + weights.hdf5
    elmo embed     ...   write ELMo vectors of a text file to HDF5
    elmo evaluate  ...   perplexity, word-sense and probing evaluations
    elmo push      ...   publish a model folder to the Hugging Face Hub
    elmo upgrade   ...   rewrite a model folder of an earlier version in today's format

Each subcommand is the ``main(argv)`` of a library module, imported only when it runs: ``elmo --help`` and
``elmo --version`` import neither torch nor transformers. ``elmo SUBCOMMAND --help`` shows its options.
"""

from __future__ import annotations

import difflib
import importlib
import sys

from .. import __version__

COMMANDS = {
    "pretrain": ("modeling_elmo.pretraining", "pretrain a bidirectional language model"),
    "convert": ("modeling_elmo.conversion.convert", "convert the original options.json + weights.hdf5"),
    "embed": ("modeling_elmo.embedding.embed", "write ELMo vectors of a text file to HDF5"),
    "evaluate": ("modeling_elmo.evaluation", "perplexity, word-sense and probing evaluations"),
    "push": ("modeling_elmo.hub", "publish a model folder to the Hugging Face Hub"),
    "upgrade": ("modeling_elmo.conversion.upgrade", "rewrite a model folder of an earlier version in today's format"),
}


def usage() -> str:
    lines = ["usage: elmo COMMAND [options]", "       elmo --version", "", "commands:"]
    lines += [f"  {name:<10} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += ["", "Run `elmo COMMAND --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"elmo (modeling_elmo) {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        print(f"elmo: error: unknown command {command!r}{hint}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)
