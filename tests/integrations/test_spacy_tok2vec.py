"""The ``elmo.Tok2Vec.v1`` spaCy architecture (`modeling_elmo.integrations.spacy_tok2vec`): one vector per token, the
paper's scalar mix of the frozen biLM's layers as the model itself computes them, gradients for the mix and the
projection only, a saved pipeline that carries its biLM, and ``spacy train`` with the packaged base configs."""

from __future__ import annotations

import re
import shutil
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
import torch
from support import assert_same_numbers

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, save_model_folder

spacy = pytest.importorskip("spacy", reason='spaCy is an optional extra: pip install ".[spacy]"')
from spacy.training import Example  # noqa: E402
from spacy.util import registry  # noqa: E402

from modeling_elmo.integrations.spacy_tok2vec import ARCHITECTURE, bilm_of, elmo_tok2vec  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The layer runs the package's packed recurrence (as `ElmoEmbedder` does), the folder's own code the plain one.
KERNEL_RTOL = 1e-5
TEXTS = ["The bank raised its rates .", "We sat  on the river bank", "Hi", ""]
TAGGED = [
    ("The bank raised its rates .", ["DET", "NOUN", "VERB", "PRON", "NOUN", "PUNCT"]),
    ("We sat on the river bank", ["PRON", "VERB", "ADP", "DET", "NOUN", "NOUN"]),
    ("Rates rose .", ["NOUN", "VERB", "PUNCT"]),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, request):
    torch.manual_seed(0)
    config = ElmoConfig.from_json_file(str(request.config.rootpath / "configuration" / "elmo-tiny.json"))
    folder = tmp_path_factory.mktemp("tok2vec") / "elmo"
    save_model_folder(ElmoModel(config).eval(), ElmoTokenizer(), folder)
    return folder


def docs_of(texts):
    nlp = spacy.blank("en")
    return [nlp.make_doc(text) for text in texts]


def initialised(folder, **settings):
    model = elmo_tok2vec(str(folder), **settings)
    model.initialize(X=docs_of(TEXTS[:2]))
    return model


def folder_layers(folder, words: list[str]) -> np.ndarray:
    """Every layer of ``words`` as one sequence, ``(L + 1, len(words), 2P)``, from the folder through AutoModel and
    the folder's own code."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), trust_remote_code=True).eval()
    encoding = ElmoTokenizer.from_pretrained(str(folder))([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**encoding, output_hidden_states=True).hidden_states
    return torch.stack(hidden)[:, 0].numpy()


def tagger_pipeline(folder):
    nlp = spacy.blank("en")
    tok2vec = {"@architectures": ARCHITECTURE, "model": str(folder)}
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})
    return nlp


def mix_node(model):
    (node,) = [n for n in model.walk() if n.name == "elmo_scalar_mix"]
    return node


def test_the_architecture_is_registered_as_a_spacy_entry_point():
    (point,) = [p for p in entry_points(group="spacy_architectures") if p.name == ARCHITECTURE]
    assert point.load() is elmo_tok2vec
    assert registry.architectures.get(ARCHITECTURE) is elmo_tok2vec


def test_each_doc_gets_one_row_per_token_of_the_projection_width(folder):
    model = initialised(folder)
    docs = docs_of(TEXTS)
    outputs = model.predict(docs)
    assert [y.shape for y in outputs] == [(len(doc), 256) for doc in docs]
    assert model.get_dim("nO") == 256
    narrow = initialised(folder, width=24, projection="linear")
    assert [y.shape for y in narrow.predict(docs)] == [(len(doc), 24) for doc in docs]
    assert [y.shape for y in initialised(folder, width=0).predict(docs)] == [(len(doc), 32) for doc in docs]


def test_the_mix_is_gamma_times_the_softmax_weighted_sum_of_the_models_layers(folder):
    model = initialised(folder, width=0)
    w = np.array([0.3, -1.2, 0.8], dtype=np.float32)
    model.set_param("w", w)
    model.set_param("gamma", np.array([0.7], dtype=np.float32))
    s = np.exp(w) / np.exp(w).sum()
    docs = docs_of(TEXTS)
    for doc, got in zip(docs, model.predict(docs), strict=True):
        words = [t for t in doc if not t.is_space]
        if not words:
            assert got.shape == (len(doc), 32)
            continue
        expected = 0.7 * np.tensordot(s, folder_layers(folder, [t.text for t in words]), axes=(0, 0))
        assert_same_numbers(got[[t.i for t in words]], expected, KERNEL_RTOL, doc.text)
        assert not got[[t.i for t in doc if t.is_space]].any()


def test_each_sentence_is_its_own_sequence_where_sentences_are_set(folder):
    model = initialised(folder, width=0)
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    doc = nlp("The bank raised its rates. We sat on the bank.")
    (got,) = model.predict([doc])
    for sentence in doc.sents:
        expected = folder_layers(folder, [t.text for t in sentence]).mean(axis=0)
        assert_same_numbers(got[sentence.start : sentence.end], expected, KERNEL_RTOL, sentence.text)


def test_the_mix_and_projection_get_their_gradients_and_the_bilm_none(folder):
    model = initialised(folder)
    mix = mix_node(model)
    mix.set_param("w", np.array([0.3, -1.2, 0.8], dtype=np.float32))
    docs = docs_of(TEXTS[:3])
    rng = np.random.default_rng(0)
    outputs, backprop = model.begin_update(docs)
    d_outputs = [rng.standard_normal(y.shape).astype(np.float32) for y in outputs]
    backprop(d_outputs)
    for node in model.walk():
        for name in node.param_names:
            assert node.has_grad(name) and np.abs(node.get_grad(name)).sum() > 0, (node.name, name)
    bilm = bilm_of(model).embedder.model
    assert all(not p.requires_grad and p.grad is None for p in bilm.parameters())


def test_the_mix_gradients_are_those_of_its_formula(folder):
    model = initialised(folder, width=0)
    mix = mix_node(model)
    mix.set_param("w", np.array([0.3, -1.2, 0.8], dtype=np.float32))
    mix.set_param("gamma", np.array([1.3], dtype=np.float32))
    docs = docs_of(TEXTS[:3])
    rng = np.random.default_rng(0)
    outputs, backprop = model.begin_update(docs)
    d_outputs = [rng.standard_normal(y.shape).astype(np.float32) for y in outputs]
    backprop(d_outputs)

    def loss(params: dict[str, np.ndarray]) -> float:
        for name, value in params.items():
            mix.set_param(name, value)
        return float(sum((y.astype(np.float64) * d).sum() for y, d in zip(model.predict(docs), d_outputs, strict=True)))

    start = {name: mix.get_param(name).copy() for name in ("w", "gamma")}
    for name in ("w", "gamma"):  # central differences against the analytic gradient of the mix
        numeric = np.zeros_like(start[name])
        for i in range(len(numeric)):
            step = np.zeros_like(start[name])
            step[i] = 1e-2
            numeric[i] = (loss({**start, name: start[name] + step}) - loss({**start, name: start[name] - step})) / 2e-2
        loss(start)
        np.testing.assert_allclose(mix.get_grad(name), numeric, rtol=2e-2, atol=1e-3, err_msg=name)


def test_a_tagger_initialises_on_docs_no_component_has_annotated(folder):
    nlp = tagger_pipeline(folder)
    examples = [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in TAGGED]
    assert all(not eg.predicted.has_annotation("TAG") and eg.predicted.tensor.size == 0 for eg in examples)
    optimizer = nlp.initialize(lambda: examples)
    losses = nlp.update(examples, sgd=optimizer)
    assert losses["tagger"] > 0
    assert [t.tag_ for t in nlp("The bank raised its rates .")] != [""] * 6


def test_a_saved_pipeline_carries_its_bilm_and_reloads_with_the_same_vectors(folder, tmp_path):
    copy = tmp_path / "elmo"
    shutil.copytree(folder, copy)
    nlp = tagger_pipeline(copy)
    examples = [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in TAGGED]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    tok2vec = nlp.get_pipe("tagger").model.get_ref("tok2vec")
    assert not np.allclose(mix_node(tok2vec).get_param("w"), 0)  # trained: not the initial mix
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(copy)  # the biLM's own folder is gone: the pipeline's folder holds it
    again = spacy.load(tmp_path / "pipeline")
    docs = docs_of(TEXTS)
    expected = tok2vec.predict(docs)
    got = again.get_pipe("tagger").model.get_ref("tok2vec").predict(docs)
    for a, b, text in zip(got, expected, TEXTS, strict=True):
        assert_same_numbers(a, b, KERNEL_RTOL, text)
    sentence = "The bank raised its rates ."
    assert [t.tag_ for t in again(sentence)] == [t.tag_ for t in nlp(sentence)]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"model": ""}, f"{ARCHITECTURE}: give the model, a folder or Hub id (model = \"path/or/id\"), got ''."),
        ({"width": -1}, f"{ARCHITECTURE}: width must be a positive integer (0: no projection), got -1."),
        ({"projection": "relu"}, f"{ARCHITECTURE}: projection must be one of maxout, linear, got 'relu'."),
        ({"batch_size": 0}, f"{ARCHITECTURE}: batch_size must be a positive integer, got 0."),
    ],
)
def test_a_bad_setting_is_refused_in_one_line_naming_it(folder, settings, message):
    with pytest.raises(ValueError) as caught:
        elmo_tok2vec(**{"model": str(folder), **settings})
    assert str(caught.value) == message


def ini_blocks(page: str, heading: str) -> list[str]:
    text = (REPO_ROOT / "docs" / page).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return re.findall(r"```ini\n(.*?)```", text[start : end if end > 0 else None], flags=re.S)


def test_the_docs_show_the_packaged_base_configs():
    from modeling_elmo.integrations.spacy_training import base_config_text

    assert ini_blocks("embed.md", "### Training spaCy components on ELMo") == [
        base_config_text("tagger"),
        base_config_text("textcat"),
    ]


def test_the_baseline_config_swaps_only_the_tok2vec():
    from thinc.api import Config

    from modeling_elmo.integrations.spacy_training import HASH_EMBED_CNN, base_config_text, hashembed_config

    for kind in ("tagger", "textcat"):
        elmo = Config().from_str(base_config_text(kind), interpolate=False)
        baseline = Config().from_str(hashembed_config(base_config_text(kind)), interpolate=False)
        assert baseline["components"][kind]["model"]["tok2vec"] == HASH_EMBED_CNN
        baseline["components"][kind]["model"]["tok2vec"] = elmo["components"][kind]["model"]["tok2vec"]
        assert baseline == elmo
    with pytest.raises(ValueError, match="one component on elmo.Tok2Vec.v1, found 0"):
        hashembed_config(hashembed_config(base_config_text("tagger")))


def test_the_docbins_hold_the_words_and_their_tags_or_classes(tmp_path):
    from spacy.tokens import DocBin

    from modeling_elmo.evaluation.data import LabelledSentence, TaggedSentence
    from modeling_elmo.integrations.spacy_training import labelled_docbin, tagged_docbin

    tagged = [TaggedSentence(text.split(), tags) for text, tags in TAGGED]
    assert tagged_docbin(tagged, tmp_path / "tagged.spacy") == 3
    vocab = spacy.blank("en").vocab
    docs = list(DocBin().from_disk(tmp_path / "tagged.spacy").get_docs(vocab))
    assert [([t.text for t in d], [t.tag_ for t in d]) for d in docs] == [(s.tokens, s.tags) for s in tagged]
    labelled = [LabelledSentence(["a", "fine", "film"], 1), LabelledSentence(["dull"], 0)]
    assert labelled_docbin(labelled, tmp_path / "labelled.spacy") == 2
    docs = list(DocBin().from_disk(tmp_path / "labelled.spacy").get_docs(vocab))
    assert [d.cats for d in docs] == [{"negative": 0.0, "positive": 1.0}, {"negative": 1.0, "positive": 0.0}]
    with pytest.raises(ValueError, match="label 2 has no name"):
        labelled_docbin([LabelledSentence(["x"], 2)], tmp_path / "bad.spacy")


def training_sentences():
    """40 tagged and 40 labelled sentences: UD English EWT and SST-2 where the shared data is, else built-in ones."""
    from conftest import shared_data_dir

    from modeling_elmo.evaluation.data import LabelledSentence, TaggedSentence, read_conllu, read_sst2

    ewt = shared_data_dir() / "pos-ud-ewt" / "en_ewt-ud-train.conllu"
    sst2 = shared_data_dir() / "sentiment-sst2" / "train.tsv"
    tagged = (
        read_conllu(ewt, max_sentences=40) if ewt.is_file() else [TaggedSentence(t.split(), g) for t, g in TAGGED * 14]
    )
    if sst2.is_file():
        labelled = read_sst2(sst2, max_examples=40)
    else:
        labelled = [LabelledSentence(t.split(), i % 2) for i, (t, _) in enumerate(TAGGED * 14)]
    return tagged, labelled


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tagger", "textcat"])
def test_spacy_train_trains_the_packaged_config_and_the_pipeline_loads_and_annotates(kind, folder, tmp_path):
    from modeling_elmo.integrations.spacy_training import (
        base_config_text,
        labelled_docbin,
        tagged_docbin,
        train_pipeline,
    )

    tagged, labelled = training_sentences()
    if kind == "tagger":
        tagged_docbin(tagged, tmp_path / "train.spacy")
    else:
        labelled_docbin(labelled, tmp_path / "train.spacy")
    steps = {"training.max_steps": 6, "training.eval_frequency": 3}
    trained = train_pipeline(
        base_config_text(kind),
        tmp_path / "train.spacy",
        tmp_path / "train.spacy",
        tmp_path / "run",
        {f"components.{kind}.model.tok2vec.model": str(folder), **steps},
        timeout=600,
    )
    score = "tag_acc" if kind == "tagger" else "cats_macro_f"
    assert 0 <= trained.scores[score] <= 1
    nlp = spacy.load(trained.folder)
    assert nlp.pipe_names == [kind]
    assert nlp.get_pipe(kind).model.get_ref("tok2vec").name.startswith(("elmo_scalar_mix", "chain"))
    doc = nlp("The bank raised its rates .")
    if kind == "tagger":
        assert all(t.tag_ in nlp.get_pipe("tagger").labels for t in doc)
    else:
        assert set(doc.cats) == {"negative", "positive"} and sum(doc.cats.values()) == pytest.approx(1, abs=1e-5)


@pytest.mark.slow
def test_the_comparison_trains_both_tok2vecs_on_the_same_sentences_and_reports_their_dev_scores(folder, tmp_path):
    from modeling_elmo.integrations.spacy_training import compare_tok2vecs

    data = tmp_path / "data"
    for task_folder in ("pos-ud-ewt", "sentiment-sst2"):
        (data / task_folder).mkdir(parents=True)
    tagged, labelled = training_sentences()
    conllu = ""
    for s in tagged:
        conllu += "".join(
            f"{i + 1}\t{w}\t_\t{t}\t_\t_\t0\t_\t_\t_\n" for i, (w, t) in enumerate(zip(s.tokens, s.tags, strict=True))
        )
        conllu += "\n"
    for split in ("train", "dev"):
        (data / "pos-ud-ewt" / f"en_ewt-ud-{split}.conllu").write_text(conllu, encoding="utf-8")
        tsv = "label\tsentence\n" + "".join(f"{s.label}\t{' '.join(s.tokens)}\n" for s in labelled)
        (data / "sentiment-sst2" / f"{split}.tsv").write_text(tsv, encoding="utf-8")
    rows = compare_tok2vecs(
        str(folder),
        data,
        tmp_path / "out",
        train_sentences={"tagger": 30, "textcat": 30},
        max_steps={"tagger": 2, "textcat": 2},
    )
    assert [(r["task"], r["tok2vec"], r["train_sentences"], r["updates"]) for r in rows] == [
        ("tagger", "elmo.Tok2Vec.v1", 30, 2),
        ("tagger", "spacy.HashEmbedCNN.v2", 30, 2),
        ("textcat", "elmo.Tok2Vec.v1", 30, 2),
        ("textcat", "spacy.HashEmbedCNN.v2", 30, 2),
    ]
    for row in rows:
        scores = [row["tag_acc"]] if row["task"] == "tagger" else [row["cats_micro_f"], row["cats_macro_f"]]
        assert all(0 <= score <= 1 for score in scores) and row["seconds"] > 0, row
