"""Write ELMo layer activations for every line of a text file to HDF5 (the old `allennlp elmo` command).

    python scripts/embed.py sentences.txt elmo.hdf5 --model path/or/hub-id --all
    accelerate launch --multi_gpu --num_processes 4 scripts/embed.py sentences.txt elmo.hdf5 --model m --top

The work is done by ``modeling_elmo.embed`` (also available as ``elmo embed``); see docs/embed.md for the file layout,
blank lines, resuming, multi-process runs and the errors it refuses with.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from modeling_elmo.embed import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
