"""Embedding export: `inference` (`ElmoEmbedder`, loading a model folder for the package's tools), `embed` (the
``elmo embed`` command: HDF5 output, resumable, parallel) and `features` (cached features for `Trainer`).
"""
