#!/usr/bin/env python
"""Pretrain an ELMo biLM: the same script on one CPU, one GPU, many GPUs or many nodes.

    accelerate launch scripts/pretrain.py --config quickstart          # offline, the packaged corpus
    accelerate launch scripts/pretrain.py --train-file corpus/*.txt --model-config elmo-tiny --max-steps 200
    accelerate launch --config_file configuration/accelerate/multi-gpu.yaml scripts/pretrain.py \
        --config seed-wikitext103
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \
        --mixed_precision no --dynamo_backend no scripts/pretrain.py --config ...   # 2-process CPU DDP

All logic lives in `modeling_elmo.pretraining` (docs/pretraining.md); `python scripts/pretrain.py --help` lists the
options. The package must be installed (`bash scripts/install.sh`): presets, recipes and the corpus are package data.
"""

import sys

try:
    from modeling_elmo.pretraining import main
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/pretrain.py: the modeling_elmo package is not installed: run `pip install .` in the clone "
        "(or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )

if __name__ == "__main__":
    sys.exit(main())
