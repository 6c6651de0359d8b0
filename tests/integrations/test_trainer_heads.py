"""Every head trains under a plain transformers `Trainer`: the biLM head (pretraining from scratch), both
classification heads with the biLM frozen and fine-tuned. The arguments `Trainer` passes are handled as transformers
models handle them: with ``num_items_in_batch`` a loss is the summed loss over that count, so gradient accumulation
gives the gradient of one large batch; the output switches of the config are honoured."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from datasets import Dataset
from torch.nn import functional as F
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

from modeling_elmo import (
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "a bird"]
VERBS = ["sees", "likes", "finds", "follows"]
OBJECTS = ["the river", "a red ball", "the small house", "some bread", "the tall tree"]
GOOD, BAD = ["good", "great", "lovely", "fine"], ["bad", "awful", "poor", "dull"]


def corpus(count: int, seed: int = 0) -> list[str]:
    """Sentences of a small grammar: a biLM can learn which word follows and precedes which."""
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ." for _ in range(count)]


def tiny_config(**extra) -> ElmoConfig:
    values = dict(
        projection_dim=16,
        cell_size=32,
        char_embedding_dim=8,
        char_cnn_filters=[[1, 8], [2, 16], [3, 16]],
        num_highway_layers=1,
        hidden_dropout_prob=0.0,
        classifier_dropout=0.0,
    )
    return ElmoConfig(**{**values, **extra})


def training_args(tmp_path, **extra) -> TrainingArguments:
    values = dict(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        per_device_train_batch_size=16,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    return TrainingArguments(**{**values, **extra})


def logged_losses(trainer: Trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


@pytest.fixture
def lm_tokenizer(tmp_path):
    words = sorted({w for s in corpus(200) for w in s.split()})
    (tmp_path / "vocab.txt").write_text("\n".join(["<pad>", "<S>", "</S>", "<UNK>", *words]) + "\n")
    return ElmoTokenizer(vocab_file=str(tmp_path / "vocab.txt"), split_pattern="whitespace")


def label_padding_collator(tokenizer: ElmoTokenizer):
    """Pads the words and the per-word labels (word ids or tags) to the batch's length, labels with -100."""

    def collate(features):
        labels = [f.pop("labels") for f in features]
        batch = tokenizer.pad(features, padding=True, return_tensors="pt")
        steps = batch["attention_mask"].shape[1]
        batch["labels"] = torch.tensor([row + [-100] * (steps - len(row)) for row in labels])
        return batch

    return collate


@pytest.mark.slow
def test_trainer_pretrains_the_bilm_head_and_its_loss_falls(lm_tokenizer, tmp_path):
    data = Dataset.from_dict({"text": corpus(192)})
    data = data.map(lambda b: lm_tokenizer(b["text"], return_word_ids=True), batched=True, remove_columns=["text"])
    data = data.rename_column("word_ids", "labels")
    torch.manual_seed(0)
    model = ElmoForBidirectionalLM(tiny_config(vocab_size=len(lm_tokenizer)))
    trainer = Trainer(
        model=model,
        args=training_args(
            tmp_path, max_steps=24, learning_rate=3e-2, gradient_accumulation_steps=2, per_device_eval_batch_size=64
        ),
        train_dataset=data,
        eval_dataset=data,
        data_collator=label_padding_collator(lm_tokenizer),
    )
    assert trainer.model_accepts_loss_kwargs  # so Trainer passes num_items_in_batch, and the model normalises by it
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    losses = logged_losses(trainer)
    assert len(losses) == 24 and all(np.isfinite(losses))
    assert np.mean(losses[-4:]) < 0.8 * np.mean(losses[:4]), losses
    # a uniform guess over the vocabulary costs log V nats; the grammar's words are far more predictable
    assert before > 0.9 * np.log(len(lm_tokenizer)) and after < 0.75 * before, (before, after)


def classification_data(head: str, tokenizer: ElmoTokenizer) -> Dataset:
    rng = random.Random(1)
    rows = []
    for i in range(96):
        polarity = i % 2
        if head == "sequence":  # judgements of one polarity: a random biLM's pooled features can tell them apart
            rows.append({"text": " ".join(rng.choices(GOOD if polarity else BAD, k=3)), "label": polarity})
        else:  # tag the judgement words: 1 good, 2 bad, 0 anything else
            subject, verb, judgement = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(GOOD if polarity else BAD)
            sentence = f"{subject} {verb} {judgement} {rng.choice(OBJECTS)}"
            words = sentence.split()
            rows.append({"text": sentence, "labels": [1 if w in GOOD else 2 if w in BAD else 0 for w in words]})
    data = Dataset.from_list(rows)
    return data.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])


@pytest.mark.parametrize("freeze", [True, False], ids=["frozen", "fine-tuned"])
@pytest.mark.parametrize("head", ["sequence", "token"])
@pytest.mark.slow
def test_trainer_trains_both_classification_heads_frozen_or_fine_tuned(head, freeze, tmp_path):
    tokenizer = ElmoTokenizer(split_pattern="whitespace")
    data = classification_data(head, tokenizer)
    torch.manual_seed(0)
    head_class = ElmoForSequenceClassification if head == "sequence" else ElmoForTokenClassification
    model = head_class(tiny_config(num_labels=2 if head == "sequence" else 3, freeze_elmo=freeze))
    bilm_before = {k: v.clone() for k, v in model.elmo.state_dict().items()}
    collator = DataCollatorWithPadding(tokenizer) if head == "sequence" else label_padding_collator(tokenizer)
    trainer = Trainer(
        model=model,
        args=training_args(tmp_path, num_train_epochs=8, learning_rate=5e-2),
        train_dataset=data,
        data_collator=collator,
    )
    trainer.train()
    losses = logged_losses(trainer)
    assert len(losses) == 48 and all(np.isfinite(losses))
    assert np.mean(losses[-6:]) < 0.7 * np.mean(losses[:6]), losses
    changed = [k for k, v in model.elmo.state_dict().items() if not torch.equal(v, bilm_before[k])]
    if freeze:
        assert changed == []
    else:
        assert "char_encoder.char_embeddings.weight" in changed and any(
            ".input_transform.weight" in k for k in changed
        ), changed


# ------------------------------------------------------------------ num_items_in_batch, against direct sums
def _batch(tokenizer, sentences):
    return tokenizer(sentences, padding=True, return_tensors="pt", return_word_ids=True)


def test_with_num_items_the_bilm_loss_is_the_halved_nll_sum_over_that_count(lm_tokenizer):
    torch.manual_seed(0)
    model = ElmoForBidirectionalLM(tiny_config(vocab_size=len(lm_tokenizer))).eval()
    enc = _batch(lm_tokenizer, corpus(3))
    labels = enc.pop("word_ids").masked_fill(enc["attention_mask"] == 0, -100)
    plain = model(**enc, labels=labels)
    summed = model(**enc, labels=labels, num_items_in_batch=torch.tensor(11))
    expected = 0.5 * (plain.forward_nll_sum + plain.backward_nll_sum) / 11
    torch.testing.assert_close(summed.loss, expected)
    torch.testing.assert_close(
        plain.loss,
        0.5 * (plain.forward_nll_sum / plain.num_forward_targets + plain.backward_nll_sum / plain.num_backward_targets),
    )


@pytest.mark.parametrize("problem", ["single_label_classification", "multi_label_classification", "regression"])
def test_with_num_items_the_sequence_loss_is_the_summed_loss_over_that_count(problem):
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(num_labels=3, problem_type=problem)).eval()
    enc = ElmoTokenizer()(["a b c", "d e", "f"], padding=True, return_tensors="pt")
    labels = {
        "single_label_classification": torch.tensor([0, 2, 1]),
        "multi_label_classification": torch.tensor([[1.0, 0, 1], [0, 1, 0], [1, 1, 0]]),
        "regression": torch.tensor([[0.5, -1.0, 2.0], [0.0, 1.0, 1.0], [3.0, 0.0, -2.0]]),
    }[problem]
    out = model(**enc, labels=labels, num_items_in_batch=7)
    logits = out.logits
    per_item = {
        "single_label_classification": lambda: F.cross_entropy(logits, labels, reduction="none"),
        "multi_label_classification": lambda: F.binary_cross_entropy_with_logits(logits, labels, reduction="none"),
        "regression": lambda: (logits - labels) ** 2,
    }[problem]()
    torch.testing.assert_close(out.loss, per_item.sum() / 7)
    torch.testing.assert_close(model(**enc, labels=labels).loss, per_item.mean())


def test_gradient_accumulation_with_num_items_gives_the_gradient_of_the_whole_batch():
    torch.manual_seed(0)
    model = ElmoForTokenClassification(tiny_config(num_labels=3)).eval()
    enc = ElmoTokenizer()(["a b c d", "e f", "g h i", "j"], padding=True, return_tensors="pt")
    labels = torch.tensor([[0, 1, 2, 1], [2, 0, -100, -100], [1, -100, 0, -100], [2, -100, -100, -100]])
    count = int((labels != -100).sum())

    def gradient(parts):
        model.zero_grad()
        for rows in parts:
            model(
                input_ids=enc["input_ids"][rows],
                attention_mask=enc["attention_mask"][rows],
                labels=labels[rows],
                num_items_in_batch=torch.tensor(count),
            ).loss.backward()
        return model.classifier.weight.grad.clone()

    whole = gradient([slice(0, 4)])
    torch.testing.assert_close(gradient([slice(0, 1), slice(1, 4)]), whole)
    model.zero_grad()
    model(**enc, labels=labels).loss.backward()  # the plain mean: the same here, one batch holds every item
    torch.testing.assert_close(model.classifier.weight.grad, whole)


def test_unknown_keyword_arguments_are_refused_and_those_of_other_models_ignored():
    model = ElmoForSequenceClassification(tiny_config(num_labels=2)).eval()
    enc = ElmoTokenizer()(["a b"], return_tensors="pt")
    with pytest.raises(TypeError, match="unexpected keyword argument 'labelz'"):
        model(**enc, labelz=torch.tensor([1]))
    with torch.no_grad():
        same = model(**enc, token_type_ids=torch.zeros(1, 2, dtype=torch.long)).logits
        torch.testing.assert_close(same, model(**enc).logits)


# ------------------------------------------------------------------ output switches
def test_config_output_hidden_states_and_return_dict_are_honoured_by_every_class(lm_tokenizer):
    enc = _batch(lm_tokenizer, corpus(2))
    labels = enc.pop("word_ids")
    for model_class, extra in (
        (ElmoModel, {}),
        (ElmoForBidirectionalLM, {"labels": labels}),
        (ElmoForSequenceClassification, {}),
        (ElmoForTokenClassification, {}),
    ):
        torch.manual_seed(0)
        config = tiny_config(vocab_size=len(lm_tokenizer), num_labels=2, output_hidden_states=True)
        model = model_class(config).eval()
        with torch.no_grad():
            out = model(**enc, **extra)
            assert len(out.hidden_states) == config.num_hidden_layers + 1, model_class.__name__
            as_tuple = model(**enc, **extra, return_dict=False)
            model.config.return_dict = False
            assert isinstance(model(**enc, **extra), tuple)
            assert len(as_tuple) == len(out.to_tuple()), model_class.__name__
            model.config.output_hidden_states = False
            assert model(**enc, **extra, return_dict=True).hidden_states is None


def test_the_bilm_head_returns_one_row_per_word_and_its_own_positions_on_request(lm_tokenizer):
    torch.manual_seed(0)
    model = ElmoForBidirectionalLM(tiny_config(vocab_size=len(lm_tokenizer))).eval()
    enc = _batch(lm_tokenizer, corpus(2))
    enc.pop("word_ids")
    with torch.no_grad():
        words = model(**enc, output_hidden_states=True)
        out = model(**enc, output_hidden_states=True, keep_sentence_boundaries=True)
        base = model.elmo(**enc, keep_sentence_boundaries=True, output_hidden_states=True)
        per_word = model.elmo(**enc, output_hidden_states=True)
    assert out.hidden_states[-1].shape[1] == enc["attention_mask"].shape[1] + 2
    for mine, reference in zip(out.hidden_states, base.hidden_states, strict=False):
        torch.testing.assert_close(mine, reference)
    torch.testing.assert_close(out.last_hidden_state, out.hidden_states[-1])
    for mine, reference in zip(words.hidden_states, per_word.hidden_states, strict=False):
        torch.testing.assert_close(mine, reference)
    torch.testing.assert_close(words.last_hidden_state, words.hidden_states[-1])
