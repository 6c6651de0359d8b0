"""A tiny random biLM folder with a 10-word vocabulary, shared by the evaluation tests."""

from __future__ import annotations

import pytest
import torch

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoTokenizer,
    save_model_folder,
)

TINY = dict(
    projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1
)


WORDS = ["the", "bank", "river", "money", "a", "good", "bad", "film", "is", "was"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random biLM with a 14-word vocabulary, saved with its tokenizer."""

    root = tmp_path_factory.mktemp("tiny")
    (root / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    tok = ElmoTokenizer(vocab_file=str(root / "vocab.txt"))
    config = ElmoConfig(vocab_size=tok.vocab_size, **TINY)
    torch.manual_seed(123)  # not the untrained comparison's seed (0)
    lm = ElmoForBidirectionalLM(config).eval()
    save_model_folder(lm, tok, root / "model")
    return lm, tok, config, root / "model"
