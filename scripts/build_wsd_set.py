#!/usr/bin/env python
"""Build the small sense-labelled set shipped as ``modeling_elmo/evaluation/wsd_small.jsonl``.

    python scripts/build_wsd_set.py --data-dir DATA                        # reproduces the shipped file
    python scripts/build_wsd_set.py --data-dir DATA --per-sense 50 --out my_wsd.jsonl

Source: ``DATA/wsd-senseval2-lexsample/senseval2_lexsample.tsv`` (NLTK "senseval" corpus:
line / hard / serve / interest, Leacock et al.; Bruce & Wiebe; "distributed with permission", research use).
"""

from __future__ import annotations

import sys

from modeling_elmo.evaluation.cli import build_wsd_main

if __name__ == "__main__":
    sys.exit(build_wsd_main())
