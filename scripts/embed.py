"""Write ELMo layer activations for every line of a text file to HDF5 (the old `allennlp elmo` command).

    python scripts/embed.py sentences.txt elmo.hdf5 --model path/or/hub-id --all
    accelerate launch --multi_gpu --num_processes 4 scripts/embed.py sentences.txt elmo.hdf5 --model m --top

The work is done by ``modeling_elmo.embedding.embed`` (also available as ``elmo embed``); see docs/embed.md for the file
layout, blank lines, resuming, multi-process runs and the errors it refuses with.
"""

import sys

try:
    from modeling_elmo.embedding.embed import main
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/embed.py: the modeling_elmo package is not installed: run `pip install .` in the clone "
        "(or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )

if __name__ == "__main__":
    raise SystemExit(main())
