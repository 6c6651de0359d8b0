# Copyright 2026 The modeling_elmo authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""ELMo word vectors for Flair (0.15, on transformers 4.57, or any later release that installs beside this package).

Flair's `TransformerWordEmbeddings` cannot drive ELMo: it aligns sub-tokens to words through a fast tokenizer's
``word_ids`` or by re-splitting the text (ELMo reads one row of characters per word, from its own tokenizer) and takes
the model output's last field as the hidden states. `ElmoEmbeddings` gives each Flair token its word's vector.

    from flair.models import SequenceTagger
    from modeling_elmo.integrations.flair import ElmoEmbeddings

    embeddings = ElmoEmbeddings("path/to/elmo-folder")  # every layer concatenated; mode="top" or "average" too
    tagger = SequenceTagger(hidden_size=256, embeddings=embeddings, tag_dictionary=tags, tag_type="ner")

A saved tagger keeps the folder's path (or Hub id), not its weights: `SequenceTagger.load` needs this module imported
(it registers the class with Flair) and the folder still there.

This module is named after the library it serves; ``import flair`` below is the real Flair (imports are absolute).
"""

from __future__ import annotations

import flair
import torch
from flair.data import Sentence
from flair.embeddings import TokenEmbeddings
from flair.embeddings.base import register_embeddings

from ..modeling_elmo import ElmoModel
from ..tokenization_elmo import ElmoTokenizer
from ..utils.loading import check_model_location

MODES = ("all", "top", "average")


@register_embeddings
class ElmoEmbeddings(TokenEmbeddings):
    """One vector per Flair token from an ELMo folder: its L + 1 layers concatenated (``mode="all"``, the default of
    Flair's former AllenNLP-based class), the top layer (``"top"``) or their mean (``"average"``).

    Args:
        model: a saved ELMo folder or Hub repository id (loaded by this package's classes: no remote code runs).
        mode: ``"all"``, ``"top"`` or ``"average"``.
        fine_tune: train the biLM with the tagger (the vectors are then recomputed every epoch).
        batch_size: sentences per forward pass.
    """

    def __init__(self, model: str, mode: str = "all", fine_tune: bool = False, batch_size: int = 32):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        self.name = f"elmo-{model}-{mode}"
        self.static_embeddings = not fine_tune
        super().__init__()
        self.model_name, self.mode, self.fine_tune, self.batch_size = str(model), mode, fine_tune, batch_size
        check_model_location(self.model_name)  # one line naming a folder that does not exist
        self.tokenizer = ElmoTokenizer.from_pretrained(self.model_name)
        self.model = ElmoModel.from_pretrained(self.model_name)
        self.model.requires_grad_(fine_tune)
        layers = self.model.config.num_hidden_layers + 1
        self._embedding_length = self.model.config.hidden_size * (layers if mode == "all" else 1)
        self.to(flair.device)
        self.eval()

    @property
    def embedding_length(self) -> int:
        return self._embedding_length

    def _add_embeddings_internal(self, sentences: list[Sentence]) -> list[Sentence]:
        """Each token's vector, from the model's rows for the sentence's words as Flair split them."""
        for start in range(0, len(sentences), self.batch_size):
            batch = [sentence for sentence in sentences[start : start + self.batch_size] if len(sentence) > 0]
            if not batch:
                continue
            words = [[token.text for token in sentence] for sentence in batch]
            encoding = self.tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
            encoding = {key: value.to(flair.device) for key, value in encoding.items()}
            with torch.set_grad_enabled(self.fine_tune and torch.is_grad_enabled()):
                layers = self.model(**encoding, output_hidden_states=True).hidden_states
            if self.mode == "all":
                vectors = torch.cat(layers, dim=-1)
            elif self.mode == "top":
                vectors = layers[-1]
            else:
                vectors = torch.stack(layers).mean(dim=0)
            for row, sentence in zip(vectors, batch, strict=True):
                for position, token in enumerate(sentence):
                    token.set_embedding(self.name, row[position])
        return sentences

    def to_params(self) -> dict:
        return {"model": self.model_name, "mode": self.mode, "fine_tune": self.fine_tune, "batch_size": self.batch_size}

    @classmethod
    def from_params(cls, params: dict) -> ElmoEmbeddings:
        return cls(**params)
