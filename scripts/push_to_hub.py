#!/usr/bin/env python
"""Publish an ELMo model folder to the Hugging Face Hub (see `modeling_elmo.hub`).

python scripts/push_to_hub.py MODEL_DIR --repo-id NAME [--dry-run] [--private] [--revision R]
"""

import sys

try:
    from modeling_elmo.hub import main
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/push_to_hub.py: the modeling_elmo package is not installed: run `pip install .` in the clone "
        "(or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )

if __name__ == "__main__":
    raise SystemExit(main())
