#!/usr/bin/env python
"""Publish an ELMo model folder to the Hugging Face Hub (see `modeling_elmo.hub`).

    python scripts/push_to_hub.py MODEL_DIR --repo-id NAME [--dry-run] [--private] [--revision R]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout without installing

from modeling_elmo.hub import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
