"""ELMo vectors in spaCy: the ``elmo`` pipeline component.

Installed with the package's ``spacy`` extra (``pip install "modeling-elmo[spacy]"``), the component is found by name
through the ``spacy_factories`` entry point, with no import:

```python
>>> nlp = spacy.blank("en")                                                  # doctest: +SKIP
>>> nlp.add_pipe("elmo", config={"model": "path/or/hub-id"})                 # doctest: +SKIP
>>> doc = nlp("The bank raised its rates.")                                  # doctest: +SKIP
>>> doc[1].vector.shape, doc[1].similarity(nlp("A river bank.")[2])          # doctest: +SKIP
```

For each Doc the biLM runs over the Doc's words (one sequence per sentence where an earlier component set sentence
boundaries, else the whole Doc), batched over the Docs of `nlp.pipe`. The chosen layer combination (``layer``: the
mean of the L + 1 layers, or one layer's index) becomes ``doc.tensor`` (tokens x 2P, float32; zeros for whitespace
tokens, which the biLM does not see), and the Doc's vector hooks read it, so `Token.vector`, `Span.vector`,
`Doc.vector` (the mean over the non-whitespace tokens), ``has_vector``, ``vector_norm`` and ``similarity`` (the
cosine, also between two occurrences of one word, which spaCy alone calls identical) are ELMo's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc, Span, Token

from ..embedding.inference import ElmoEmbedder, check_device

#: ``layer`` value that averages every layer (the character CNN and each LSTM layer) with equal weights.
AVERAGE = "average"


class ElmoComponent:
    """Sets ``doc.tensor`` to each token's ELMo vector and the Doc's vector hooks (see the module's docstring).

    Args:
        model: a folder saved by the package (``elmo pretrain``, ``elmo convert``, ``save_pretrained``) or a Hub id.
        layer: ``"average"`` (the mean of the L + 1 layers) or a layer index (0 = character CNN, -1 = top LSTM).
        batch_size: sentences per forward pass.
        device: where the biLM runs (``"cpu"``, ``"cuda"``, ...).
    """

    def __init__(self, model: str, layer: int | str = AVERAGE, batch_size: int = 32, device: str = "cpu"):
        check_device(device, "elmo component")  # before the model is loaded
        self.embedder = ElmoEmbedder.from_pretrained(model, device=device)
        num_layers = self.embedder.num_layers
        if layer != AVERAGE and (isinstance(layer, bool) or not isinstance(layer, int)):
            raise ValueError(f'elmo component: layer must be "{AVERAGE}" or a layer index, got {layer!r}.')
        if layer != AVERAGE and not -num_layers <= layer < num_layers:
            raise ValueError(f"elmo component: layer {layer} is out of range for a model of {num_layers} layers.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"elmo component: batch_size must be a positive integer, got {batch_size!r}.")
        self.layer = layer
        self.batch_size = batch_size

    def __call__(self, doc: Doc) -> Doc:
        (doc,) = self.set_vectors([doc])
        return doc

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        """The Docs of ``stream`` in order, ``batch_size`` Docs at a time through the biLM."""
        batch: list[Doc] = []
        for doc in stream:
            batch.append(doc)
            if len(batch) >= batch_size:
                yield from self.set_vectors(batch)
                batch = []
        if batch:
            yield from self.set_vectors(batch)

    def set_vectors(self, docs: list[Doc]) -> list[Doc]:
        """Run the biLM over every sequence of ``docs`` at once and set each Doc's tensor and hooks."""
        pieces = [(doc, positions) for doc in docs for positions in word_sequences(doc)]
        layers = self.embedder.embed_sentences(
            [[doc[i].text for i in positions] for doc, positions in pieces],
            batch_size=self.batch_size,
            show_progress=False,
        )
        for doc in docs:
            doc.tensor = np.zeros((len(doc), self.embedder.output_size), dtype=np.float32)
            doc.user_hooks.update(vector=_doc_vector, has_vector=_has_vector, similarity=_similarity)
            doc.user_span_hooks.update(vector=_span_vector, has_vector=_has_vector, similarity=_similarity)
            doc.user_token_hooks.update(vector=_token_vector, has_vector=_token_has_vector, similarity=_similarity)
        for (doc, positions), sequence in zip(pieces, layers, strict=True):
            chosen = sequence.mean(axis=0) if self.layer == AVERAGE else sequence[self.layer]
            doc.tensor[positions] = chosen
        return docs


def word_sequences(doc: Doc) -> list[list[int]]:
    """Positions of the non-whitespace tokens of each sentence of ``doc`` (the whole Doc where no component set
    sentence boundaries); sentences of whitespace only are dropped."""
    spans = list(doc.sents) if doc.has_annotation("SENT_START") else [doc[:]]
    sequences = [[token.i for token in span if not token.is_space] for span in spans]
    return [positions for positions in sequences if positions]


def _token_vector(token: Token) -> np.ndarray:
    return token.doc.tensor[token.i]


def _token_has_vector(token: Token) -> bool:
    return not token.is_space


def _span_vector(span: Span) -> np.ndarray:
    return _mean_of_words(span.doc, range(span.start, span.end))


def _doc_vector(doc: Doc) -> np.ndarray:
    return _mean_of_words(doc, range(len(doc)))


def _mean_of_words(doc: Doc, positions: Iterable[int]) -> np.ndarray:
    words = [i for i in positions if not doc[i].is_space]
    if not words:
        return np.zeros(doc.tensor.shape[1], dtype=np.float32)
    return doc.tensor[words].mean(axis=0)


def _similarity(first: Doc | Span | Token, second: Any) -> float:
    """The cosine of the two vectors (0 where either is zero). spaCy's own `Token.similarity` calls two tokens of the
    same word 1.0 similar; contextual vectors tell them apart."""
    a, b = first.vector, second.vector
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(a @ b) / norms if norms else 0.0


def _has_vector(doc_or_span: Doc | Span) -> bool:
    return any(not token.is_space for token in doc_or_span)


@Language.factory(
    "elmo",
    assigns=["doc.tensor"],
    default_config={"model": None, "layer": AVERAGE, "batch_size": 32, "device": "cpu"},
)
def make_elmo_component(
    nlp: Language, name: str, model: str | None, layer: Any, batch_size: int, device: str
) -> ElmoComponent:
    """The ``elmo`` factory: ``nlp.add_pipe("elmo", config={"model": folder_or_hub_id})``."""
    if not model:
        raise ValueError('elmo component: give the model, e.g. nlp.add_pipe("elmo", config={"model": "path/or/id"}).')
    return ElmoComponent(str(model), layer=layer, batch_size=batch_size, device=device)
