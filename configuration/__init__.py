"""Model presets (``elmo-*.json``), pretraining recipes (``recipes/*.yaml``) and accelerate launcher configs
(``accelerate/*.yaml``). Installed as package data ``modeling_elmo.configuration``; the tools find it installed or,
in a checkout, here (`modeling_elmo.utils.package_data`). The folder holds no code.
"""
