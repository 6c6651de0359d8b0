#!/usr/bin/env python
"""Evaluate an ELMo model (thin shell over `modeling_elmo.evaluation.cli`); same as ``elmo evaluate``.

    python scripts/evaluate.py MODEL --task perplexity --text heldout.txt --unigram-fit train.txt
    python scripts/evaluate.py MODEL --task wsd-probe probe-sentiment probe-pos --compare-untrained
    python scripts/evaluate.py MODEL --task probe-pos --data-dir DATA     # a local copy instead of the Hub

See docs/evaluation.md.
"""

from __future__ import annotations

import sys

try:
    from modeling_elmo.evaluation.cli import main
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/evaluate.py: the modeling_elmo package is not installed: run `pip install .` in the clone "
        "(or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )

if __name__ == "__main__":
    sys.exit(main())
