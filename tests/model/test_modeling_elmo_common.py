"""transformers' `ModelTesterMixin` and `ConfigTester` (from the installed release's source distribution) on the ELMo
classes, as the test file of a model inside transformers runs them: initialisation, save/load, hidden states,
training, gradients, mismatched shapes... Flags state real properties of the architecture; a test is skipped only
where it cannot apply to a character biLSTM, with the reason."""

from __future__ import annotations

import unittest
from unittest import mock

import pytest
import torch
from transformers.models.auto import modeling_auto
from transformers_suites import suite_module

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

pytestmark = pytest.mark.slow  # transformers' common suite: hundreds of model builds

ModelTesterMixin = suite_module("test_modeling_common").ModelTesterMixin
ConfigTester = suite_module("test_configuration_common").ConfigTester


class ElmoModelTester:
    """Tiny configurations and inputs: a batch of sentences of different lengths (right padding)."""

    def __init__(
        self,
        parent,
        batch_size=3,
        seq_length=5,
        projection=8,
        cell_size=12,
        num_hidden_layers=2,
        vocab_size=40,
        num_labels=3,
    ):
        self.parent = parent
        self.batch_size, self.seq_length = batch_size, seq_length
        self.projection, self.cell_size = projection, cell_size
        self.hidden_size = 2 * projection  # the width of every output layer: forward and backward halves
        self.num_hidden_layers = num_hidden_layers
        self.vocab_size, self.num_labels = vocab_size, num_labels
        self.is_training = True

    def get_config(self) -> ElmoConfig:
        return ElmoConfig(
            projection_dim=self.projection,
            cell_size=self.cell_size,
            num_hidden_layers=self.num_hidden_layers,
            char_embedding_dim=4,
            char_cnn_filters=[[1, 4], [2, 4]],
            num_highway_layers=1,
            max_characters_per_token=10,
            vocab_size=self.vocab_size,
            num_labels=self.num_labels,
            hidden_dropout_prob=0.0,
            classifier_dropout=0.0,
        )

    def prepare_config_and_inputs(self):
        words = ["the", "bank", "closed", "a", "river", "ran", "dry", "cells", "divide", "fast", "then", "slowly"]
        generator = torch.Generator().manual_seed(0)
        lengths = [self.seq_length] + [
            int(n) for n in torch.randint(1, self.seq_length + 1, (self.batch_size - 1,), generator=generator)
        ]
        sentences = [[words[int(i)] for i in torch.randint(0, len(words), (n,), generator=generator)] for n in lengths]
        tokenizer = ElmoTokenizer(max_characters_per_token=10)
        enc = tokenizer(
            sentences, is_split_into_words=True, padding="max_length", max_length=self.seq_length, return_tensors="pt"
        )
        return self.get_config(), {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class ElmoModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (ElmoModel, ElmoForBidirectionalLM, ElmoForSequenceClassification, ElmoForTokenClassification)
    has_attentions = False  # a biLSTM: no attention, so no attention weights to return
    test_resize_embeddings = False  # a character model has no token table: resize refuses (test_modeling_elmo.py)
    test_can_init_all_missing_weights_before_2023 = True  # ELMo is from 2018; its _init_weights covers every weight

    @classmethod
    def setUpClass(cls):
        # A model inside transformers is listed in the Auto mappings, from which the mixin tells a base model (no
        # loss to train) and a head's labels; for the duration of this class, ELMo is listed there too.
        cls._listed = [
            mock.patch.dict(getattr(modeling_auto, mapping), {"elmo": name})
            for mapping, name in (
                ("MODEL_MAPPING_NAMES", "ElmoModel"),
                ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "ElmoForSequenceClassification"),
                ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "ElmoForTokenClassification"),
            )
        ]
        for patch in cls._listed:
            patch.start()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        for patch in cls._listed:
            patch.stop()

    def setUp(self):
        self.model_tester = ElmoModelTester(self)
        self.config_tester = ConfigTester(
            self,
            config_class=ElmoConfig,
            hidden_size=16,
            vocab_size=40,
            common_properties=["hidden_size", "num_hidden_layers"],
        )

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is ElmoForBidirectionalLM:  # word ids of the input words
            batch, steps = self.model_tester.batch_size, self.model_tester.seq_length
            inputs_dict["labels"] = torch.randint(
                4, self.model_tester.vocab_size, (batch, steps), generator=torch.Generator().manual_seed(0)
            )
        return inputs_dict

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_retain_grad_hidden_states_attentions(self):
        self.skipTest(
            "the returned layers are copies of the biLM's layers with the sentence boundaries removed and "
            "the padding zeroed: the LSTM layers read the sequence with boundaries, so the top layer does "
            "not depend on the returned lower layers and they get no gradient from it"
        )

    def test_load_with_mismatched_shapes(self):
        self.skipTest(
            "it expects the base model to refuse a changed vocab_size, but the biLM reads characters and has "
            "no weight sized by the word vocabulary (only the LM softmax is); a classifier of another size "
            "is refused and re-initialised on request in test_can_load_ignoring_mismatched_shapes"
        )

    # The three tests below take `get_input_embeddings()` to be a token table whose output is `inputs_embeds`. ELMo's
    # input embedding is the character encoder: character ids (batch, tokens, C) -> token vectors (batch, tokens, P),
    # which `inputs_embeds` replaces; `get_input_embeddings()` is the word-input table of a model that has one, and
    # `None` for a character model (nothing to resize). The same properties are checked with the character encoder.
    def _token_vectors(self, model, input_ids):
        batch, steps, width = input_ids.shape
        return model.base_model.char_encoder.encode(input_ids.reshape(-1, width)).view(batch, steps, -1)

    def test_model_get_set_embeddings(self):
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config)
            self.assertIsNone(model.get_input_embeddings())
            with self.assertRaisesRegex(ValueError, "has no token-embedding input to replace"):
                model.set_input_embeddings(torch.nn.Embedding(10, 10))
            with_words = model_class(
                ElmoConfig(**{**config.to_dict(), "word_input_vocab_size": 12, "word_input_dim": 3})
            )
            table = with_words.get_input_embeddings()
            self.assertIsInstance(table, torch.nn.Embedding)
            self.assertEqual((table.num_embeddings, table.embedding_dim), (12, 3))
            replacement = type(table)(12, 3)
            with_words.set_input_embeddings(replacement)
            self.assertIs(with_words.get_input_embeddings(), replacement)

    def test_inputs_embeds(self):
        config, inputs_dict = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config).eval()
            inputs = self._prepare_for_class(inputs_dict, model_class)
            inputs["inputs_embeds"] = self._token_vectors(model, inputs.pop("input_ids"))
            with torch.no_grad():
                model(**inputs)[0]

    def test_inputs_embeds_matches_input_ids(self):
        config, inputs_dict = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config).eval()
            inputs = self._prepare_for_class(inputs_dict, model_class)
            input_ids = inputs.pop("input_ids")
            with torch.no_grad():
                out_ids = model(input_ids=input_ids, **inputs)[0]
                out_embeds = model(inputs_embeds=self._token_vectors(model, input_ids), **inputs)[0]
            torch.testing.assert_close(out_embeds, out_ids, rtol=1e-5, atol=1e-6)
