"""Flair on ELMo: `modeling_elmo.integrations.flair`'s `ElmoEmbeddings` from the installed package gives each Flair
token the folder's vectors for its word, and a `SequenceTagger` on them trains, saves, and loads with
`SequenceTagger.load` in a fresh process.

Runs where Flair is installed beside the package (CI's ``transformers4`` environment: Flair 0.15.1, which keeps
transformers 4.57); skips elsewhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from support import assert_same_numbers
from support.clients import tiny_config_with

from modeling_elmo import ElmoModel, ElmoTokenizer, save_model_folder

flair = pytest.importorskip("flair", reason="Flair is not installed here (pip install flair beside the package)")
from flair.data import Dictionary, Sentence  # noqa: E402
from flair.models import SequenceTagger  # noqa: E402

from modeling_elmo.integrations.flair import ElmoEmbeddings  # noqa: E402

SENTENCES = [["The", "river", "bank", "flooded", "twice", "."], ["Paris", "is", "on", "the", "Seine"], ["Banks", "."]]
TAGS = [["O", "O", "O", "O", "O", "O"], ["LOC", "O", "O", "O", "LOC"], ["O", "O"]]  # token tags (not spans)

# A fresh interpreter: the tagger file and the folder are all it has; it imports the package's module for Flair to
# know the class, as a user's script does.
LOAD = """
import json, sys
from flair.data import Sentence
from flair.models import SequenceTagger
import modeling_elmo.integrations.flair
tagger = SequenceTagger.load(sys.argv[1])
sentences = [Sentence(words) for words in json.loads(sys.argv[2])]
tagger.predict(sentences, label_name="predicted")
print(json.dumps([[(t.get_label("predicted").value, t.get_label("predicted").score) for t in s] for s in sentences]))
"""


@pytest.fixture
def folder(tmp_path):
    torch.manual_seed(0)
    model = ElmoModel(tiny_config_with(hidden_dropout_prob=0.0)).eval()
    save_model_folder(model, ElmoTokenizer(), tmp_path / "elmo")
    return tmp_path / "elmo"


def tagged() -> list[Sentence]:
    out = []
    for words, labels in zip(SENTENCES, TAGS, strict=True):
        sentence = Sentence(words)
        for token, label in zip(sentence, labels, strict=True):
            token.add_label("ner", label)
        out.append(sentence)
    return out


def test_flair_tokens_get_the_folders_word_vectors_in_every_mode(folder):
    model = ElmoModel.from_pretrained(folder).eval()
    for mode in ("all", "top", "average"):
        embeddings = ElmoEmbeddings(str(folder), mode=mode, batch_size=2)
        embedded = [Sentence(words) for words in SENTENCES]
        embeddings.embed(embedded)
        for i, words in enumerate(SENTENCES):
            encoding = ElmoTokenizer()([words], is_split_into_words=True, return_tensors="pt")
            with torch.no_grad():
                layers = [layer[0] for layer in model(**encoding, output_hidden_states=True).hidden_states]
            want = {"all": torch.cat(layers, -1), "top": layers[-1], "average": torch.stack(layers).mean(0)}[mode]
            assert embeddings.embedding_length == want.shape[-1]
            got = torch.stack([token.get_embedding().cpu() for token in embedded[i]])
            assert_same_numbers(got, want, what=f"{mode}, sentence {i}")


def test_bad_settings_and_a_missing_folder_are_one_line_naming_the_value(folder, tmp_path):
    with pytest.raises(ValueError, match=r"^mode must be one of \('all', 'top', 'average'\), got 'last'\.$"):
        ElmoEmbeddings(str(folder), mode="last")
    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer, got 0\.$"):
        ElmoEmbeddings(str(folder), batch_size=0)
    missing = tmp_path / "no-such-folder"
    with pytest.raises(ValueError, match="^" + re.escape(f"model '{missing}' does not exist (no such folder)") + "$"):
        ElmoEmbeddings(str(missing))


@pytest.mark.slow  # trains, and loads in a fresh process
def test_a_sequence_tagger_on_elmo_trains_saves_and_loads_in_a_fresh_process(folder, tmp_path):
    dictionary = Dictionary(add_unk=False)
    for label in ("O", "LOC"):
        dictionary.add_item(label)
    torch.manual_seed(0)
    tagger = SequenceTagger(
        hidden_size=8,
        embeddings=ElmoEmbeddings(str(folder)),
        tag_dictionary=dictionary,
        tag_type="ner",
        use_crf=False,
        use_rnn=False,
        reproject_embeddings=False,
    )
    optimizer = torch.optim.Adam(tagger.parameters(), lr=0.1)
    losses = []
    for _ in range(40):
        loss, count = tagger.forward_loss(tagged())
        optimizer.zero_grad()
        (loss / count).backward()
        optimizer.step()
        losses.append(float(loss.detach()) / count)
    assert losses[-1] < 0.5 * losses[0], losses
    tagger.save(tmp_path / "tagger.pt")
    sentences = tagged()
    tagger.predict(sentences, label_name="predicted")
    trained = [[(t.get_label("predicted").value, t.get_label("predicted").score) for t in s] for s in sentences]

    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", LOAD, str(tmp_path / "tagger.pt"), json.dumps(SENTENCES)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert [[label for label, _ in s] for s in loaded] == [[label for label, _ in s] for s in trained]
    assert [len(s) for s in trained] == [len(words) for words in SENTENCES]  # a tag for every word
    assert_same_numbers([score for s in loaded for _, score in s], [score for s in trained for _, score in s])
