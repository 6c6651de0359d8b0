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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modeling_elmo.pretraining import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
