"""Helpers shared by the commands: `io_utils` (atomic writes, locks, JSON and line readers), `loading` (where a model
comes from, refusing pickles), `launch` (accelerate process checks), `characters` (character ids of words) and
`results` (the versioned results schema).
"""
