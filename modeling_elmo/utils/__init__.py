"""Helpers shared by the commands: `io_utils` (atomic writes, locks, the JSON reader, line readers, the sha256 of a
file, one-line errors), `loading` (where a model comes from, refusing pickles), `launch` (accelerate process checks),
`characters` (character ids of words), `results` (the versioned results schema) and `package_data` (where the
presets, recipes, model cards and corpora are, installed or in a checkout).
"""
