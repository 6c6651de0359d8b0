"""Convert an original ELMo release (options.json + weights.hdf5) into a transformers model folder.

    python scripts/convert_elmo_original_to_hf.py \\
        --options elmo_2x4096_512_2048cnn_2xhighway_options.json \\
        --weights elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5 \\
        --output elmo-original

The folder loads with ``AutoModel.from_pretrained(folder, trust_remote_code=True)``. The work is done by
``modeling_elmo.convert`` (also available as ``elmo convert``); see its docstring for the tensor mapping.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from modeling_elmo.convert import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
