#!/usr/bin/env python
"""Build the small sense-labelled set shipped as ``modeling_elmo/evaluation/wsd_small.jsonl``.

    python scripts/build_wsd_set.py --data-dir DATA                        # reproduces the shipped file
    python scripts/build_wsd_set.py --data-dir DATA --per-sense 50 --out my_wsd.jsonl

Source: ``DATA/wsd-senseval2-lexsample/senseval2_lexsample.tsv`` (NLTK "senseval" corpus:
line / hard / serve / interest, Leacock et al.; Bruce & Wiebe; "distributed with permission", research use).
"""

from __future__ import annotations

import sys

try:
    from modeling_elmo.evaluation.wsd import build_wsd_main
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/build_wsd_set.py: the modeling_elmo package is not installed: run `pip install .` in the clone "
        "(or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )

if __name__ == "__main__":
    sys.exit(build_wsd_main())
