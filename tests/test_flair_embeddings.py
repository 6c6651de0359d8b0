"""Flair on ELMo: `modeling_elmo/integrations/flair_elmo.py`'s `ElmoEmbeddings`, run in Flair's own environment
(Flair 0.15 needs transformers < 5, where this package cannot be installed), gives each Flair token the folder's
vectors for its word (compared with this package's output here), and a `SequenceTagger` trains on them, saves and
loads.

Needs ``ELMO_TRANSFORMERS4_PYTHON``, the path of a Python whose environment holds Flair 0.15 (and transformers 4.57,
which Flair pulls), without this package; skips without it. The file is copied alone, as a Flair user would."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from support import assert_same_numbers, in_the_public_form, run_without_package
from support.clients import tiny_config_with

from modeling_elmo import ElmoModel, ElmoTokenizer, save_model_folder

FLAIR_FILE = Path(__file__).resolve().parents[1] / "modeling_elmo" / "integrations" / "flair_elmo.py"
FLAIR_PYTHON = os.environ.get("ELMO_TRANSFORMERS4_PYTHON")
SENTENCES = [["The", "river", "bank", "flooded", "twice", "."], ["Paris", "is", "on", "the", "Seine"], ["Banks", "."]]
TAGS = [["O", "O", "O", "O", "O", "O"], ["LOC", "O", "O", "O", "LOC"], ["O", "O"]]  # token tags (not spans)

FLAIR = """
import json, sys, torch, flair
sys.path.insert(0, sys.argv[2])
from flair.data import Dictionary, Sentence
from flair.models import SequenceTagger
from flair_elmo import ElmoEmbeddings
folder, sentences, tags = sys.argv[1], json.loads(sys.argv[3]), json.loads(sys.argv[4])

def tagged():
    out = []
    for words, labels in zip(sentences, tags):
        sentence = Sentence(words)
        for token, label in zip(sentence, labels):
            token.add_label("ner", label)
        out.append(sentence)
    return out

vectors = {}
for mode in ("all", "top", "average"):
    embedded = [Sentence(words) for words in sentences]
    embeddings = ElmoEmbeddings(folder, mode=mode, batch_size=2)
    embeddings.embed(embedded)
    vectors[mode] = [[token.get_embedding().tolist() for token in sentence] for sentence in embedded]
    vectors[mode + "_length"] = embeddings.embedding_length
dictionary = Dictionary(add_unk=False)
for label in ("O", "LOC"):
    dictionary.add_item(label)
torch.manual_seed(0)
tagger = SequenceTagger(hidden_size=8, embeddings=ElmoEmbeddings(folder), tag_dictionary=dictionary, tag_type="ner",
                        use_crf=False, use_rnn=False, reproject_embeddings=False)
optimizer = torch.optim.Adam(tagger.parameters(), lr=0.1)
losses = []
for step in range(40):
    loss, count = tagger.forward_loss(tagged())
    optimizer.zero_grad()
    (loss / count).backward()
    optimizer.step()
    losses.append(float(loss) / count)
tagger.save(sys.argv[5])
loaded = SequenceTagger.load(sys.argv[5])
predicted = {}
for name, model in (("trained", tagger), ("loaded", loaded)):
    sentences_out = tagged()
    model.predict(sentences_out, label_name="predicted")
    predicted[name] = [[(t.get_label("predicted").value, t.get_label("predicted").score) for t in s]
                       for s in sentences_out]
print(json.dumps({"version": flair.__version__, "vectors": vectors, "losses": losses, "predicted": predicted}))
"""


@pytest.mark.slow
@pytest.mark.skipif(
    not FLAIR_PYTHON,
    reason="set ELMO_TRANSFORMERS4_PYTHON to a Python with flair 0.15 and transformers 4.57 (CI sets it)",
)
def test_flair_tokens_get_the_folders_word_vectors_and_a_sequence_tagger_trains_saves_and_loads(tmp_path):
    torch.manual_seed(0)
    model = in_the_public_form(ElmoModel(tiny_config_with(hidden_dropout_prob=0.0)).eval())  # as the files run alone
    save_model_folder(model, ElmoTokenizer(), tmp_path / "elmo")
    (tmp_path / "flair-code").mkdir()
    shutil.copyfile(FLAIR_FILE, tmp_path / "flair-code" / "flair_elmo.py")  # the one file, alone
    got = run_without_package(
        FLAIR,
        tmp_path / "elmo",
        tmp_path / "flair-code",
        json.dumps(SENTENCES),
        json.dumps(TAGS),
        tmp_path / "tagger.pt",
        workdir=tmp_path / "client",
        python=FLAIR_PYTHON,
    )
    assert got["version"].startswith("0.15"), got["version"]
    for i, words in enumerate(SENTENCES):
        encoding = ElmoTokenizer()([words], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            layers = [layer[0] for layer in model(**encoding, output_hidden_states=True).hidden_states]
        expected = {"all": torch.cat(layers, -1), "top": layers[-1], "average": torch.stack(layers).mean(0)}
        for mode, want in expected.items():
            assert got["vectors"][mode + "_length"] == want.shape[-1]
            assert_same_numbers(torch.tensor(got["vectors"][mode][i]), want, what=f"{mode}, sentence {i}")
    losses = got["losses"]
    assert losses[-1] < 0.5 * losses[0], losses
    trained, loaded = got["predicted"]["trained"], got["predicted"]["loaded"]
    assert [[label for label, _ in s] for s in loaded] == [[label for label, _ in s] for s in trained]
    assert [len(s) for s in trained] == [len(words) for words in SENTENCES]  # a tag for every word
    assert_same_numbers([score for s in loaded for _, score in s], [score for s in trained for _, score in s])
