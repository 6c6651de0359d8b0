"""Training spaCy components on ELMo with ``spacy train``: the packaged base configs, DocBins of the evaluation
suite's labelled sets, and one ``spacy init fill-config`` + ``spacy train`` run scored on its dev set.

The base configs (``configuration/spacy/*-elmo.cfg``, package data ``modeling_elmo.configuration``) are the ones
docs/embed.md shows; `hashembed_config` gives the same config with spaCy's default tok2vec (``spacy.HashEmbedCNN.v2``
at the tagger's default settings) in place of ``elmo.Tok2Vec.v1``, for comparisons with one head and two tok2vecs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab
from thinc.api import Config

from ..evaluation.data import LabelledSentence, TaggedSentence
from ..pretraining.arguments import configuration_files

#: The component each base config trains (its name in the pipeline).
COMPONENTS = {"tagger": "tagger", "textcat": "textcat"}
#: The class names of a two-class (SST-2) DocBin, label 0 then label 1.
SENTIMENT_LABELS = ("negative", "positive")
#: spaCy's default tok2vec for a tagger (`spacy/pipeline/tagger.pyx`'s default model).
HASH_EMBED_CNN = {
    "@architectures": "spacy.HashEmbedCNN.v2",
    "pretrained_vectors": None,
    "width": 96,
    "depth": 4,
    "embed_size": 2000,
    "window_size": 1,
    "maxout_pieces": 3,
    "subword_features": True,
}


def base_config_text(kind: str) -> str:
    """The packaged base config of ``kind`` (``"tagger"`` or ``"textcat"``) on ``elmo.Tok2Vec.v1``."""
    if kind not in COMPONENTS:
        raise ValueError(f"no base config for {kind!r} (one of {', '.join(COMPONENTS)}).")
    return (configuration_files() / "spacy" / f"{kind}-elmo.cfg").read_text(encoding="utf-8")


def hashembed_config(text: str) -> str:
    """``text`` (a config whose one component has an ``elmo.Tok2Vec.v1`` tok2vec) with ``spacy.HashEmbedCNN.v2``
    there instead, the rest unchanged."""
    config = Config().from_str(text, interpolate=False)
    found = [
        name
        for name, component in config.get("components", {}).items()
        if component.get("model", {}).get("tok2vec", {}).get("@architectures") == "elmo.Tok2Vec.v1"
    ]
    if len(found) != 1:
        raise ValueError(f"the config must have one component on elmo.Tok2Vec.v1, found {len(found)}.")
    config["components"][found[0]]["model"]["tok2vec"] = dict(HASH_EMBED_CNN)
    return config.to_str(interpolate=False)


def tagged_docbin(sentences: Sequence[TaggedSentence], path: str | os.PathLike) -> int:
    """Write ``sentences`` as a DocBin (one Doc per sentence, its words and ``tag_``s); returns the count."""
    vocab = Vocab()
    docs = DocBin(attrs=["ORTH", "TAG"])
    for sentence in sentences:
        docs.add(Doc(vocab, words=list(sentence.tokens), tags=list(sentence.tags)))
    docs.to_disk(path)
    return len(docs)


def labelled_docbin(
    sentences: Sequence[LabelledSentence], path: str | os.PathLike, labels: Sequence[str] = SENTIMENT_LABELS
) -> int:
    """Write ``sentences`` as a DocBin (one Doc per sentence, ``cats`` 1.0 for its label's name in ``labels``, 0.0
    for the others); returns the count."""
    vocab = Vocab()
    docs = DocBin(attrs=["ORTH"])
    for sentence in sentences:
        if not 0 <= sentence.label < len(labels):
            raise ValueError(f"label {sentence.label} has no name in {list(labels)}.")
        doc = Doc(vocab, words=list(sentence.tokens))
        doc.cats = {name: float(i == sentence.label) for i, name in enumerate(labels)}
        docs.add(doc)
    docs.to_disk(path)
    return len(docs)


@dataclass
class TrainedPipeline:
    """What one `train_pipeline` run gave: the best pipeline's folder, its dev scores (``meta.json``'s
    ``performance``) and the run's wall-clock seconds (fill-config, training and saving)."""

    folder: Path
    scores: dict[str, Any]
    seconds: float


def train_pipeline(
    config_text: str,
    train: str | os.PathLike,
    dev: str | os.PathLike,
    output: str | os.PathLike,
    overrides: dict[str, Any] | None = None,
    timeout: float | None = None,
) -> TrainedPipeline:
    """Fill ``config_text`` with spaCy's defaults (``spacy init fill-config``) and train it (``spacy train``, in a
    subprocess of this interpreter) on the DocBins ``train`` and ``dev``, into ``output``; ``overrides`` are
    ``spacy train``'s dotted settings (``{"training.max_steps": 100}``)."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "base.cfg").write_text(config_text, encoding="utf-8")
    started = time.perf_counter()
    _spacy("init", "fill-config", str(output / "base.cfg"), str(output / "config.cfg"), timeout=timeout)
    settings = {"paths.train": os.fspath(train), "paths.dev": os.fspath(dev), **(overrides or {})}
    flags = [item for key, value in settings.items() for item in (f"--{key}", _config_value(value))]
    _spacy("train", str(output / "config.cfg"), "--output", str(output / "pipeline"), *flags, timeout=timeout)
    seconds = time.perf_counter() - started
    best = output / "pipeline" / "model-best"
    meta = json.loads((best / "meta.json").read_text(encoding="utf-8"))
    return TrainedPipeline(best, dict(meta.get("performance") or {}), seconds)


#: The comparison's tasks: the data (under the shared data folder), the DocBin writer, the score names.
TASKS = {
    "tagger": ("pos-ud-ewt/en_ewt-ud-train.conllu", "pos-ud-ewt/en_ewt-ud-dev.conllu", ("tag_acc",)),
    "textcat": ("sentiment-sst2/train.tsv", "sentiment-sst2/dev.tsv", ("cats_micro_f", "cats_macro_f")),
}


def compare_tok2vecs(
    bilm: str,
    data_dir: str | os.PathLike,
    output: str | os.PathLike,
    tasks: Sequence[str] = ("tagger", "textcat"),
    train_sentences: dict[str, int] | None = None,
    max_steps: dict[str, int] | None = None,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    """Train each task's base config with ``elmo.Tok2Vec.v1`` on ``bilm`` and with `hashembed_config`'s
    ``spacy.HashEmbedCNN.v2``, on the same first ``train_sentences[task]`` training sentences (UD English EWT for the
    tagger, SST-2 for the text classifier, under ``data_dir``) for ``max_steps[task]`` updates (spaCy's batches: the
    same ones for both), scored on the whole dev set every 200 updates (the best evaluation's scores, as ``model-best``
    keeps); returns one row per run (task, tok2vec, train sentences, updates, dev scores, seconds)."""
    from ..evaluation.data import read_conllu, read_sst2

    sizes = {"tagger": 2000, "textcat": 10000, **(train_sentences or {})}
    steps = {"tagger": 800, "textcat": 1000, **(max_steps or {})}
    data_dir, output = Path(data_dir), Path(output)
    rows = []
    for task in tasks:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r} (one of {', '.join(TASKS)}).")
        train_file, dev_file, score_names = TASKS[task]
        folder = output / task
        folder.mkdir(parents=True, exist_ok=True)
        if task == "tagger":
            count = tagged_docbin(read_conllu(data_dir / train_file, max_sentences=sizes[task]), folder / "train.spacy")
            tagged_docbin(read_conllu(data_dir / dev_file), folder / "dev.spacy")
        else:
            count = labelled_docbin(read_sst2(data_dir / train_file, max_examples=sizes[task]), folder / "train.spacy")
            labelled_docbin(read_sst2(data_dir / dev_file), folder / "dev.spacy")
        elmo = base_config_text(task)
        overrides = {"training.max_steps": steps[task], "training.max_epochs": 0, "training.patience": 0}
        for name, run, config, extra in (
            ("elmo.Tok2Vec.v1", "elmo", elmo, {f"components.{task}.model.tok2vec.model": os.fspath(bilm)}),
            ("spacy.HashEmbedCNN.v2", "hashembedcnn", hashembed_config(elmo), {}),
        ):
            trained = train_pipeline(
                config,
                folder / "train.spacy",
                folder / "dev.spacy",
                folder / run,
                {**overrides, **extra},
                timeout=timeout,
            )
            rows.append(
                {
                    "task": task,
                    "tok2vec": name,
                    "train_sentences": count,
                    "updates": steps[task],
                    **{score: trained.scores.get(score) for score in score_names},
                    "seconds": round(trained.seconds, 1),
                }
            )
    return rows


def _config_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _spacy(*args: str, timeout: float | None) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "spacy", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if run.returncode:
        tail = (run.stderr or run.stdout).strip().splitlines()[-12:]
        raise RuntimeError(f"spacy {args[0]} failed (exit {run.returncode}):\n" + "\n".join(tail))


__all__ = [
    "HASH_EMBED_CNN",
    "SENTIMENT_LABELS",
    "TASKS",
    "TrainedPipeline",
    "base_config_text",
    "compare_tok2vecs",
    "hashembed_config",
    "labelled_docbin",
    "tagged_docbin",
    "train_pipeline",
]
