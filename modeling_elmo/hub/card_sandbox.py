"""Rendering a model-card template in Jinja's immutable sandbox, in this process or as a child interpreter.

This module imports only the standard library and jinja2, so that ``elmo push --template T`` can run it as a script
in a separate, isolated interpreter (``python -I card_sandbox.py MEMORY_LIMIT TEXT_LIMIT``, an empty environment): the
request (``{"name", "source", "values"}`` as JSON) comes on stdin, the rendered text (at most ``TEXT_LIMIT``
characters) goes to stdout. The child limits its own address space to ``MEMORY_LIMIT`` bytes before it reads anything
(`resource.setrlimit`, where the platform has it), and `modeling_elmo.hub.card` stops it after a time limit: a
template is text from the user, and filters given huge widths (``'x'|center(10**10)``, ``'{:>9999999999}'.format(1)``)
or nested loops would otherwise exhaust the memory of ``elmo push`` or never end. Exit status: 0 rendered,
`EXIT_REFUSED` (one line on stderr: the template's own error or a text too long), `EXIT_MEMORY` (the render ran out
of its memory).
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: The most items (characters, list entries, bits of a number) that ``*`` or ``**`` in a card template may build: a
#: template of 20 bytes (``{{ 'x' * 10**10 }}``, ``{{ 2 ** 10**11 }}``) would otherwise allocate gigabytes.
MAX_TEMPLATE_VALUE = 10**7
EXIT_REFUSED = 2
EXIT_MEMORY = 3


def bounded_binop(context: Any, operator: str, left: Any, right: Any) -> Any:
    """``left * right`` or ``left ** right`` of a card template, refused (`ValueError`) where the result would hold
    more than `MAX_TEMPLATE_VALUE` items or bits."""
    if operator == "*":
        for sequence, count in ((left, right), (right, left)):
            if (
                isinstance(sequence, (str, list, tuple))
                and isinstance(count, int)
                and len(sequence) * count > (MAX_TEMPLATE_VALUE)
            ):
                raise ValueError(f"a repetition of {len(sequence):,} items {count:,} times is too large")
        return left * right
    if (
        isinstance(left, int)
        and isinstance(right, int)
        and right > 0
        and left.bit_length() * right > MAX_TEMPLATE_VALUE
    ):
        raise ValueError(f"a power of {left.bit_length():,}-bit number to {right:,} is too large")
    return left**right


def sandboxed_environment():
    """Jinja's immutable sandbox, strict about undefined fields, with ``*`` and ``**`` bounded."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.intercepted_binops = frozenset({"*", "**"})  # the two that build values of any size from two digits
    environment.call_binop = bounded_binop
    return environment


def render_template(source: str, values: dict[str, Any], name: str) -> str:
    """The text of the template ``source`` (named ``name`` in messages) filled with ``values``; `ValueError` with
    one line naming the template where the template fails. A `MemoryError` passes through."""
    import jinja2
    from jinja2.sandbox import SecurityError

    try:
        return sandboxed_environment().from_string(source).render(**values)
    except MemoryError:
        raise
    except jinja2.UndefinedError as error:
        raise ValueError(f"model-card template {name}: {error.message}.") from None
    except SecurityError as error:
        raise ValueError(
            f"model-card template {name} reaches outside the card's values ({str(error).rstrip('.')}); a template "
            "may only use the fields and Jinja's own filters."
        ) from None
    except Exception as error:  # the template's own arithmetic and filters: 1/0, '{0}'.format(), a value too large
        text = " ".join(str(error).split())[:200]
        raise ValueError(f"model-card template {name} fails while rendering: {type(error).__name__}: {text}.") from None


def main(argv: list[str]) -> int:
    """The child: limit the address space to ``argv[0]`` bytes, read the request, write the text (refused where it
    is longer than ``argv[1]`` characters)."""
    try:
        import resource
    except ImportError:  # no address-space limit on this platform (Windows): the time limit still holds
        resource = None
    if resource is not None:
        limit = int(argv[0])
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):  # a platform (macOS) or a hard limit that refuses it: the time limit still holds
            pass
    try:
        request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
        text = render_template(request["source"], request["values"], request["name"])
        if len(text) > int(argv[1]):
            raise ValueError(
                f"model-card template {request['name']} renders {len(text):,} characters, more than the "
                f"{int(argv[1]):,} a card may have here."
            )
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    except MemoryError:
        return EXIT_MEMORY
    except ValueError as error:
        sys.stderr.write(" ".join(str(error).split()) + "\n")
        return EXIT_REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
