#!/usr/bin/env python
"""Evaluate an ELMo model (thin shell over `modeling_elmo.evaluation.cli`); same as ``elmo evaluate``.

    python scripts/evaluate.py MODEL --task perplexity --text heldout.txt --unigram-fit train.txt
    python scripts/evaluate.py MODEL --task wsd-probe probe-sentiment probe-pos --compare-untrained
    python scripts/evaluate.py MODEL --task probe-pos --data-dir DATA     # a local copy instead of the Hub

See docs/evaluation.md.
"""

from __future__ import annotations

import sys

from modeling_elmo.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main())
