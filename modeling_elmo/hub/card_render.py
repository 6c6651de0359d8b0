"""Rendering a model-card template, the parent's side: the template's syntax and fields checked here, the package's
own templates (`TEMPLATE_DIR`) rendered in this process, a user's ``--template`` in a child interpreter with bounded
memory, time and text (`modeling_elmo.hub.card_sandbox` is the child's side).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..utils.package_data import data_folder
from . import card_sandbox

__all__ = [
    "CARD_KINDS",
    "JINJA_SANDBOX_FLOOR",
    "REQUIRED_TEMPLATE_FIELDS",
    "TEMPLATE_DIR",
    "TEMPLATE_MEMORY_LIMIT",
    "TEMPLATE_TEXT_LIMIT",
    "TEMPLATE_TIME_LIMIT",
    "default_template_path",
    "render_model_card",
]

#: Model-card templates: ``model_cards/<kind>.md``, installed as ``modeling_elmo/model_cards/`` or in a checkout's
#: top level (`utils.package_data.data_folder`).
TEMPLATE_DIR = data_folder("model_cards")
CARD_KINDS = ("pretrained", "converted", "classifier")
#: Placeholders every template must use (a card without them would lose its metadata or its numbers).
REQUIRED_TEMPLATE_FIELDS = ("card_data", "model_id", "evaluation_section", "training_section")


def default_template_path(kind: str) -> Path:
    if kind not in CARD_KINDS:
        raise ValueError(f"card kind must be one of {', '.join(CARD_KINDS)}; got {kind!r}.")
    return TEMPLATE_DIR / f"{kind}.md"


#: The first jinja2 release whose sandbox keeps a template in: 3.1.5 and earlier let ``|attr('format')`` reach
#: ``str.format`` unguarded (CVE-2025-27516), so
#: ``{{ ('{0.__globals__[os].environ[HF_TOKEN]}'|attr('format'))(lipsum) }}`` rendered the token into the card.
JINJA_SANDBOX_FLOOR = (3, 1, 6)


#: A ``--template`` is text from the user: it is rendered in a child interpreter (`card_sandbox`, run with ``-I`` and
#: an empty environment) whose address space is limited to this many bytes plus eight times the size of the template
#: and its values, and which is stopped after `TEMPLATE_TIME_LIMIT` seconds. The templates of `TEMPLATE_DIR` are the
#: package's own and are rendered in this process.
TEMPLATE_MEMORY_LIMIT = 1 << 30
TEMPLATE_TIME_LIMIT = 60.0
#: The longest text (characters) a ``--template`` may render, plus four times the size of the template and its values:
#: what comes back from the child is read into this process.
TEMPLATE_TEXT_LIMIT = 16 * 2**20


def _is_builtin_template(path: Path) -> bool:
    return path.resolve().parent == TEMPLATE_DIR.resolve()


def _render_in_child(source: str, values: dict[str, Any], name: str, time_limit: float) -> str:
    """`card_sandbox.render_template` in a separate, isolated interpreter with bounded memory and time."""
    request = json.dumps({"name": name, "source": source, "values": values}).encode("utf-8")
    memory_limit = TEMPLATE_MEMORY_LIMIT + 8 * len(request)
    text_limit = TEMPLATE_TEXT_LIMIT + 4 * len(request)
    try:
        done = subprocess.run(
            [sys.executable, "-I", card_sandbox.__file__, str(memory_limit), str(text_limit)],
            input=request,
            capture_output=True,
            env={},  # nothing of this process's environment (a token above all) reaches the template
            timeout=time_limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(f"model-card template {name}: rendering did not finish within {time_limit:g} s.") from None
    if done.returncode == 0:
        return done.stdout.decode("utf-8")
    stderr = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode == card_sandbox.EXIT_REFUSED and stderr and "\n" not in stderr:
        raise ValueError(stderr)
    if done.returncode == card_sandbox.EXIT_MEMORY or "MemoryError" in stderr:
        raise ValueError(
            f"model-card template {name}: rendering used more than {memory_limit / 2**30:.2f} GiB of memory."
        )
    how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
    last = stderr.splitlines()[-1][:200] if stderr else "no message"
    raise ValueError(f"model-card template {name}: rendering ended with {how} ({last}).")


def render_model_card(
    template: str | os.PathLike,
    card_data: Any,
    context: Mapping[str, Any],
    *,
    time_limit: float | None = None,
):
    """Render a Jinja template into a `huggingface_hub.ModelCard` (the same rendering as
    ``ModelCard.from_template``, but strict).

    Raises `ValueError` naming the field when the template lacks one of `REQUIRED_TEMPLATE_FIELDS` or uses a
    field that neither ``context`` nor ``card_data`` provides. A template is text from the user (``--template``), so
    it is rendered in Jinja's immutable sandbox: one that reaches for Python internals (``self.__init__``, a
    method that changes a value) is refused with one line before anything of it runs. The syntax and the fields are
    checked here; a template outside `TEMPLATE_DIR` is then rendered in a child interpreter (`_render_in_child`) with
    bounded memory and at most ``time_limit`` seconds (default `TEMPLATE_TIME_LIMIT`), each refused in one line
    naming the template.
    """
    import jinja2
    from huggingface_hub import ModelCard
    from jinja2 import meta

    if tuple(int(part) for part in re.findall(r"\d+", jinja2.__version__)[:3]) < JINJA_SANDBOX_FLOOR:
        raise ValueError(
            f"jinja2 {jinja2.__version__} is installed; its sandbox lets a template read Python internals (the "
            f"environment's variables, credentials among them) through |attr('format'). Install jinja2>="
            f"{'.'.join(map(str, JINJA_SANDBOX_FLOOR))} to render a --template."
        )
    template_path = Path(template)
    if not template_path.is_file():
        raise ValueError(f"model-card template {str(template)!r} does not exist.")
    source = template_path.read_text(encoding="utf-8")
    try:
        parsed = card_sandbox.sandboxed_environment().parse(source)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(
            f"model-card template {template_path} has a syntax error on line {error.lineno}: {error.message}."
        ) from None
    used = meta.find_undeclared_variables(parsed)
    missing_required = [name for name in REQUIRED_TEMPLATE_FIELDS if name not in used]
    if missing_required:
        raise ValueError(
            f"model-card template {template_path} is missing the field(s) "
            f"{', '.join('{{ ' + n + ' }}' for n in missing_required)}."
        )
    values = dict(card_data.to_dict())
    values.update(context)
    values["card_data"] = card_data.to_yaml()
    unknown = sorted(used - set(values))
    if unknown:
        raise ValueError(
            f"model-card template {template_path} uses the field(s) {', '.join(unknown)}, which no "
            f"value fills (known fields: {', '.join(sorted(values))})."
        )
    if _is_builtin_template(template_path):
        content = card_sandbox.render_template(source, values, str(template_path))
    else:
        content = _render_in_child(
            source, values, str(template_path), TEMPLATE_TIME_LIMIT if time_limit is None else time_limit
        )
    if not content.lstrip().startswith("---"):
        raise ValueError(
            f"model-card template {template_path} must start with the YAML block '---\\n{{{{ card_data }}}}\\n---'."
        )
    return ModelCard(content)
