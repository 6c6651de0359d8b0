"""The spaCy ``elmo`` component (`modeling_elmo.integrations.spacy`): the vectors it gives each token are the model's
own output for the same words, computed here with `ElmoModel` directly, and spaCy's vector API reads them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
import torch
from support import assert_same_numbers

from modeling_elmo import ElmoModel, ElmoTokenizer, save_model_folder

REPO_ROOT = Path(__file__).resolve().parents[2]
spacy = pytest.importorskip("spacy", reason='spaCy is an optional extra: pip install ".[spacy]"')

#: The component runs the package's packed recurrence (``config.use_packed_kernels``, as `ElmoEmbedder` does), the
#: model here the plain one: another summation order through two LSTM layers.
KERNEL_RTOL = 1e-5
TEXTS = ["The bank raised its rates .", "We sat on the river bank", "Hi"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, request):
    torch.manual_seed(0)
    from modeling_elmo import ElmoConfig

    config = ElmoConfig.from_json_file(str(request.config.rootpath / "configuration" / "elmo-tiny.json"))
    model = ElmoModel(config).eval()
    folder = tmp_path_factory.mktemp("spacy") / "elmo"
    save_model_folder(model, ElmoTokenizer(), folder)
    return model, folder


def model_layers(model: ElmoModel, words: list[str]) -> np.ndarray:
    """Every layer of ``words`` as one sequence, ``(L + 1, len(words), 2P)``, from the model itself."""
    encoding = ElmoTokenizer()([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**encoding, output_hidden_states=True).hidden_states
    return torch.stack(hidden)[:, 0].numpy()


def pipeline(folder, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(folder), **config})
    return nlp


def test_token_vectors_are_the_mean_of_the_models_layers_for_the_same_words(saved):
    model, folder = saved
    nlp = pipeline(folder)
    for doc in nlp.pipe(TEXTS, batch_size=2):
        expected = model_layers(model, [t.text for t in doc]).mean(axis=0)
        assert doc.tensor.shape == expected.shape
        assert_same_numbers(np.stack([t.vector for t in doc]), expected, KERNEL_RTOL, doc.text)
        assert_same_numbers(doc.vector, expected.mean(axis=0), KERNEL_RTOL, doc.text)
        if len(doc) >= 3:
            assert_same_numbers(doc[1:3].vector, expected[1:3].mean(axis=0), KERNEL_RTOL, doc.text)


def test_one_layer_is_chosen_by_its_index(saved):
    model, folder = saved
    doc = pipeline(folder, layer=-1)(TEXTS[0])
    assert_same_numbers(doc.tensor, model_layers(model, [t.text for t in doc])[-1], KERNEL_RTOL)


def test_a_docs_vectors_do_not_depend_on_the_other_docs_of_its_batch(saved):
    _, folder = saved
    nlp = pipeline(folder, batch_size=2)
    alone = [nlp(text).tensor for text in TEXTS]
    together = [doc.tensor for doc in nlp.pipe(TEXTS * 2, batch_size=3)]
    for got, expected in zip(together, alone * 2, strict=True):
        assert_same_numbers(got, expected)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_similarity_is_the_cosine_of_the_contextual_vectors_even_for_the_same_word(saved):
    _, folder = saved
    nlp = pipeline(folder)
    first, second = nlp(TEXTS[0]), nlp(TEXTS[1])
    bank, river_bank = first[1], second[5]  # "bank" in two contexts: spaCy alone calls the same word 1.0 similar
    assert bank.text == river_bank.text and bank.has_vector and first.has_vector
    assert bank.similarity(river_bank) == pytest.approx(cosine(bank.vector, river_bank.vector), rel=1e-5)
    assert bank.similarity(river_bank) < 0.999
    assert bank.vector_norm == pytest.approx(float(np.linalg.norm(bank.vector)), rel=1e-5)
    assert first.similarity(second) == pytest.approx(cosine(first.vector, second.vector), rel=1e-5)
    assert first[0:2].similarity(second[4:6]) == pytest.approx(cosine(first[0:2].vector, second[4:6].vector), rel=1e-5)
    assert bank.similarity(second) == pytest.approx(cosine(bank.vector, second.vector), rel=1e-5)


def test_each_sentence_is_its_own_sequence_where_sentences_are_set_and_whitespace_gets_no_vector(saved):
    model, folder = saved
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"model": str(folder)})
    doc = nlp("The bank raised its rates.  We sat on the bank.")
    sentences = list(doc.sents)
    assert len(sentences) == 2
    for sentence in sentences:
        words = [t for t in sentence if not t.is_space]
        expected = model_layers(model, [t.text for t in words]).mean(axis=0)
        assert_same_numbers(np.stack([t.vector for t in words]), expected, KERNEL_RTOL, sentence.text)
    (space,) = [t for t in doc if t.is_space]
    assert not space.has_vector and not space.vector.any()
    assert_same_numbers(doc.vector, doc.tensor[[t.i for t in doc if not t.is_space]].mean(axis=0))


def test_a_saved_pipeline_loads_back_with_the_component_and_the_same_vectors(saved, tmp_path):
    _, folder = saved
    nlp = pipeline(folder, layer=-1, batch_size=4)
    nlp.to_disk(tmp_path / "pipeline")
    again = spacy.load(tmp_path / "pipeline")
    assert again.pipe_names == ["elmo"] and again.get_pipe("elmo").layer == -1
    assert_same_numbers(again(TEXTS[0]).tensor, nlp(TEXTS[0]).tensor)


def test_an_empty_doc_gets_an_empty_tensor(saved):
    _, folder = saved
    doc = pipeline(folder)("")
    assert doc.tensor.shape == (0, 32)  # elmo-tiny: 2P = 32
    assert not doc.has_vector


@pytest.mark.parametrize(
    "config, message",
    [
        ({}, 'elmo component: give the model, e.g. nlp.add_pipe("elmo", config={"model": "path/or/id"}).'),
        ({"layer": "top"}, "elmo component: layer must be \"average\" or a layer index, got 'top'."),
        ({"layer": 3}, "elmo component: layer 3 is out of range for a model of 3 layers."),
        ({"batch_size": 0}, "elmo component: batch_size must be a positive integer, got 0."),
    ],
)
def test_a_bad_setting_is_refused_in_one_line_naming_it(saved, config, message):
    _, folder = saved
    if config:
        config = {"model": str(folder), **config}
    nlp = spacy.blank("en")
    with pytest.raises(ValueError) as caught:
        nlp.add_pipe("elmo", config=config)
    assert str(caught.value) == message


def test_the_documented_example_prints_contextual_similarities(saved, tmp_path, monkeypatch, capsys):
    """docs/embed.md's spaCy example, as written, next to the saved model."""
    text = (REPO_ROOT / "docs" / "embed.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text[text.index("## In spaCy") :], flags=re.S).group(1)
    shutil.copytree(saved[1], tmp_path / "outputs" / "elmo-quickstart")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/embed.md", "exec"), {"__name__": "__docs__"})  # noqa: S102 (the documentation's code)
    words, documents = capsys.readouterr().out.strip().splitlines()
    assert words.startswith("(32,) ") and -1 <= float(words.split()[-1]) < 0.999
    assert -1 <= float(documents) <= 1


def test_the_factory_is_registered_as_a_spacy_entry_point():
    (point,) = [p for p in entry_points(group="spacy_factories") if p.name == "elmo"]
    from modeling_elmo.integrations.spacy import make_elmo_component

    assert point.load() is make_elmo_component


@pytest.mark.slow
def test_a_fresh_process_adds_the_component_by_name_without_importing_the_package(saved):
    model, folder = saved
    script = (
        "import json, sys, spacy\n"
        "nlp = spacy.blank('en')\n"
        "nlp.add_pipe('elmo', config={'model': sys.argv[1]})\n"
        "print(json.dumps(nlp(sys.argv[2]).tensor.tolist()))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(folder), TEXTS[1]], capture_output=True, text=True, check=True, timeout=300
    )
    expected = model_layers(model, TEXTS[1].split()).mean(axis=0)
    got = np.array(json.loads(run.stdout.splitlines()[-1]), dtype=np.float32)
    assert_same_numbers(got, expected, KERNEL_RTOL)


@pytest.mark.parametrize("device", ["cuda:7", "cuda:x", "tpu"])
def test_a_device_torch_cannot_use_is_refused_in_one_line_naming_it(saved, device):
    """``device="cuda:7"`` on a machine without it gave a bare ``AssertionError`` from inside torch."""
    import torch

    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    _, folder = saved
    nlp = spacy.blank("en")
    with pytest.raises(ValueError) as caught:
        nlp.add_pipe("elmo", config={"model": str(folder), "device": device})
    message = str(caught.value)
    if device != "cuda:7":
        expected = f"elmo component: device '{device}' is not a device torch knows ("
    elif torch.cuda.is_available():
        expected = "elmo component: device 'cuda:7' does not exist: torch sees "
    else:
        expected = "elmo component: device 'cuda:7' asked for a GPU, but torch sees none."
    assert message.startswith(expected) and "\n" not in message, message
