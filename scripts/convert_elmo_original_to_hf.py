"""Convert an original ELMo release into a transformers model folder (the same command as ``elmo convert``).

A published English model, downloaded (and cached) from where AllenNLP released it:

    python scripts/convert_elmo_original_to_hf.py --release original --output elmo-original

Local files:

    python scripts/convert_elmo_original_to_hf.py \\
        --options elmo_2x4096_512_2048cnn_2xhighway_options.json \\
        --weights elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5 \\
        --output elmo-original

The folder loads with ``AutoModel.from_pretrained(folder, trust_remote_code=True)`` and is ready for ``elmo push``.
The work is done by ``modeling_elmo.conversion.convert`` and ``modeling_elmo.conversion.releases``; see
``docs/conversion.md``.
"""

import sys

try:
    from modeling_elmo.conversion.convert import main
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/convert_elmo_original_to_hf.py: the modeling_elmo package is not installed: run `pip install .` in "
        "the clone (or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )

if __name__ == "__main__":
    raise SystemExit(main())
