"""Text corpora that ship with the package (package data, no code): ``elmo pretrain --train-file builtin:NAME``.

Each corpus is a folder ``NAME/`` with ``train.txt``, ``validation.txt`` and ``test.txt`` (one tokenised sentence per
line) and a ``README.md`` giving its source and licence. `modeling_elmo.pretraining.arguments.builtin_corpus_file`
resolves the names.
"""
