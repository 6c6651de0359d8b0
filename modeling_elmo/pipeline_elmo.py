# Copyright 2026 The modeling_elmo authors.
# SPDX-License-Identifier: Apache-2.0 (https://www.apache.org/licenses/LICENSE-2.0)
"""The token-classification pipeline of an ELMo tagger: one entity per word. A saved `ElmoForTokenClassification`
names it in ``config.custom_pipelines``, so ``pipeline("token-classification", model=folder, trust_remote_code=True)``
uses it."""

from __future__ import annotations

from typing import Any

import torch
from transformers import TokenClassificationPipeline

#: The ``config.custom_pipelines`` entry a saved tagger carries.
CUSTOM_PIPELINES = {
    "token-classification": {
        "impl": "pipeline_elmo.ElmoTokenClassificationPipeline",
        "pt": ["AutoModelForTokenClassification"],
        "type": "text",
    }
}


class ElmoTokenClassificationPipeline(TokenClassificationPipeline):
    """`TokenClassificationPipeline` for ELMo taggers, whose tokens are words read as rows of character ids: one entity
    per word, with its offsets in the text, label and score. Aggregation ``"none"`` and ``"simple"`` apply."""

    def preprocess(self, sentence: Any, offset_mapping: Any = None, **preprocess_params: Any):
        if preprocess_params.get("is_split_into_words"):
            if not isinstance(sentence, list):
                raise ValueError("When `is_split_into_words=True`, `sentence` must be a list of words.")
            words, sentence = sentence, preprocess_params.get("delimiter", " ").join(sentence)
        elif isinstance(sentence, str):
            words = self.tokenizer.split_words(sentence)
        else:
            raise ValueError(
                f"When `is_split_into_words=False`, `sentence` must be a string, got {type(sentence).__name__}."
            )
        # a batch of one sentence: a text without words (``""``) is one empty sentence, tagged as no entity
        inputs = self.tokenizer([words], is_split_into_words=True, return_tensors="pt")
        offsets, cursor = [], 0
        for word in words:  # the words in the order they occur in the text
            start = sentence.find(word, cursor)
            offsets.append((start, start + len(word)) if start >= 0 else (-1, -1))
            cursor = start + len(word) if start >= 0 else cursor
        yield {
            **inputs,
            "special_tokens_mask": torch.zeros(1, len(words), dtype=torch.long),
            "offset_mapping": torch.tensor(offsets, dtype=torch.long).reshape(1, len(words), 2),
            "sentence": sentence,
            "is_last": True,
        }

    def gather_pre_entities(
        self, sentence: str, input_ids, scores, offset_mapping, special_tokens_mask, aggregation_strategy, **kwargs
    ) -> list[dict]:
        entities = []
        for index, word_scores in enumerate(scores):
            start, end = (int(v) for v in offset_mapping[index])
            # A word the text does not hold as it is (lower-cased by the tokenizer, say) is read back from its row.
            word = sentence[start:end] if start >= 0 else self.tokenizer.decode(input_ids[index : index + 1])
            start, end = (start, end) if start >= 0 else (None, None)
            entities.append(dict(word=word, scores=word_scores, start=start, end=end, index=index, is_subword=False))
        return entities


__all__ = ["CUSTOM_PIPELINES", "ElmoTokenClassificationPipeline"]
