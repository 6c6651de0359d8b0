"""Model presets (``elmo-*.json``), pretraining recipes (``recipes/*.yaml``) and accelerate launcher configs
(``accelerate/*.yaml``). Installed as package data ``modeling_elmo.configuration`` and found with
`importlib.resources` (`modeling_elmo.pretraining.arguments`); the folder holds no code.
"""
