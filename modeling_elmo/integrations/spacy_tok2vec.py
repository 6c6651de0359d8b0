"""ELMo as a trainable spaCy tok2vec layer: the ``elmo.Tok2Vec.v1`` architecture.

Installed with the package's ``spacy`` extra, the architecture is found by name through the ``spacy_architectures``
entry point, so a ``spacy train`` config needs only:

```ini
[components.tagger.model.tok2vec]
@architectures = "elmo.Tok2Vec.v1"
model = "path/or/hub-id"
```

The model is ``chain(mix, projection)``:

- ``mix`` runs the frozen biLM over each batch's Docs once (under ``torch.inference_mode``: no gradient reaches the
  biLM, whose parameters are also set not to require one) and returns the paper's scalar mix of its L + 1 layers,
  ``gamma * sum_k softmax(w)_k h_k``, one row per token (zeros for whitespace tokens, which the biLM does not see).
  ``w`` (starting at zeros: the layers' mean) and ``gamma`` (starting at 1) are trained.
- ``projection`` (``width`` > 0, the default 256) is a trainable layer-normalised Maxout (``"maxout"``, 3 pieces) or a
  linear layer (``"linear"``) to ``width`` columns; ``width = 0`` gives the mix itself (2P columns).

The output is one ``Floats2d`` per Doc (tokens x width), as every tok2vec layer gives. The biLM is loaded when the
layer is initialised (``nlp.initialize``, which `spacy train` calls with sample Docs that nothing has annotated) or
first used. ``nlp.to_disk`` writes the biLM's weights and tokenizer into the pipeline's folder beside the trained mix
and projection, so ``spacy.load`` reads the biLM from there, not from ``model``: a saved pipeline is self-contained.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import srsly
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Linear, Maxout, Model, chain, deserialize_attr, serialize_attr, with_array
from thinc.types import Floats2d

from ..embedding.inference import ElmoEmbedder
from ..utils.loading import without_transformers_progress_bars
from .spacy import word_sequences

#: The architecture's registered name, as a ``spacy train`` config names it.
ARCHITECTURE = "elmo.Tok2Vec.v1"
PROJECTIONS = ("maxout", "linear")
#: Format of the biLM bytes a saved pipeline holds.
_FORMAT = 1


class FrozenBiLM:
    """The frozen biLM of an ``elmo.Tok2Vec.v1`` layer: loaded on first use from ``model`` (a folder or Hub id), or
    from the bytes of a saved pipeline (`from_bytes`), which hold its weights and tokenizer.

    Args:
        model: a folder saved by the package (``elmo pretrain``, ``elmo convert``, ``save_pretrained``) or a Hub id.
        batch_size: sentences per forward pass.
        device: where the biLM runs (``"cpu"``, ``"cuda"``, ...).
    """

    def __init__(self, model: str, batch_size: int = 64, device: str = "cpu"):
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self._embedder: ElmoEmbedder | None = None
        self._bytes: bytes | None = None  # the weights never change: serialised once

    @property
    def embedder(self) -> ElmoEmbedder:
        if self._embedder is None:
            self._load(self.model)
        return self._embedder

    def _load(self, location: str) -> None:
        with without_transformers_progress_bars():
            self._use(ElmoEmbedder.from_pretrained(location, device=self.device))

    def _use(self, embedder: ElmoEmbedder) -> None:
        embedder.model.requires_grad_(False)
        self._embedder = embedder

    @property
    def num_layers(self) -> int:
        """L + 1: the character CNN and each LSTM layer."""
        return self.embedder.num_layers

    @property
    def output_size(self) -> int:
        """2P: the width of each layer."""
        return self.embedder.output_size

    def layers(self, docs: list[Doc]) -> list[np.ndarray]:
        """Every layer of each Doc's tokens, ``(L + 1, len(doc), 2P)`` float32, one forward pass over the batch: each
        sentence its own sequence where sentence boundaries are set (else the whole Doc); zeros for whitespace."""
        embedder = self.embedder
        pieces = [(i, positions) for i, doc in enumerate(docs) for positions in word_sequences(doc)]
        vectors = embedder.embed_sentences(
            [[docs[i][p].text for p in positions] for i, positions in pieces],
            batch_size=self.batch_size,
            show_progress=False,
        )
        out = [np.zeros((embedder.num_layers, len(doc), embedder.output_size), dtype=np.float32) for doc in docs]
        for (i, positions), layers in zip(pieces, vectors, strict=True):
            out[i][:, positions] = layers
        return out

    def to_bytes(self) -> bytes:
        """The biLM's folder (config, safetensors weights, tokenizer files) and settings as one msgpack message."""
        if self._bytes is None:
            from .. import save_model_folder

            embedder = self.embedder
            with tempfile.TemporaryDirectory(prefix="elmo-spacy-") as folder, without_transformers_progress_bars():
                save_model_folder(embedder.model, embedder.tokenizer, folder)
                files = {entry.name: Path(entry.path).read_bytes() for entry in os.scandir(folder) if entry.is_file()}
            self._bytes = srsly.msgpack_dumps(
                {"format": _FORMAT, "model": self.model, "batch_size": self.batch_size, "files": files}
            )
        return self._bytes

    def from_bytes(self, data: bytes) -> FrozenBiLM:
        """Load the biLM from `to_bytes`' message (written to a temporary folder, read, removed)."""
        message = srsly.msgpack_loads(data)
        if not isinstance(message, dict) or message.get("format") != _FORMAT:
            raise ValueError(f"{ARCHITECTURE}: the saved biLM is not in a format this version reads.")
        with tempfile.TemporaryDirectory(prefix="elmo-spacy-") as folder:
            for name, content in message["files"].items():
                if os.path.basename(name) != name:
                    raise ValueError(f"{ARCHITECTURE}: the saved biLM holds a file outside its folder: {name!r}.")
                Path(folder, name).write_bytes(content)
            self._load(folder)
        self._bytes = data
        return self


@serialize_attr.register(FrozenBiLM)
def _serialize_bilm(_: FrozenBiLM, value: FrozenBiLM, name: str, model: Model) -> bytes:
    return value.to_bytes()


@deserialize_attr.register(FrozenBiLM)
def _deserialize_bilm(current: FrozenBiLM, value: bytes, name: str, model: Model) -> FrozenBiLM:
    return current.from_bytes(value)


def elmo_scalar_mix(bilm: FrozenBiLM) -> Model[list[Doc], list[Floats2d]]:
    """The frozen biLM's layers of each Doc mixed with trained softmax weights and scale (``w``, ``gamma``)."""
    return Model(
        "elmo_scalar_mix",
        _mix_forward,
        init=_mix_init,
        attrs={"bilm": bilm},
        dims={"nO": None, "nL": None},
        params={"w": None, "gamma": None},
    )


def _mix_init(model: Model, X: Any = None, Y: Any = None) -> None:
    bilm: FrozenBiLM = model.attrs["bilm"]
    model.set_dim("nL", bilm.num_layers)
    model.set_dim("nO", bilm.output_size)
    model.set_param("w", model.ops.alloc1f(bilm.num_layers))  # softmax(0) = the layers' mean
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def _mix_forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats2d], Callable]:
    ops = model.ops
    layers = [ops.asarray3f(x) for x in model.attrs["bilm"].layers(docs)]
    w = model.get_param("w")
    gamma = float(model.get_param("gamma")[0])
    shifted = ops.xp.exp(w - w.max())
    s = shifted / shifted.sum()
    mixed = [ops.xp.tensordot(s, x, axes=(0, 0)) for x in layers]  # (tokens, 2P) each
    outputs = [gamma * m for m in mixed]

    def backprop(d_outputs: list[Floats2d]) -> list[Doc]:
        d_gamma = sum(float((d * m).sum()) for d, m in zip(d_outputs, mixed, strict=True))
        d_s = gamma * sum(
            (ops.xp.tensordot(x, d, axes=((1, 2), (0, 1))) for x, d in zip(layers, d_outputs, strict=True)),
            ops.alloc1f(len(s)),
        )
        model.inc_grad("w", s * (d_s - (s * d_s).sum()))
        model.inc_grad("gamma", ops.asarray1f([d_gamma]))
        return []  # nothing flows into the Docs: the biLM is frozen

    return outputs, backprop


@registry.architectures(ARCHITECTURE)
def elmo_tok2vec(
    model: str,
    width: int = 256,
    projection: str = "maxout",
    batch_size: int = 64,
    device: str = "cpu",
) -> Model[list[Doc], list[Floats2d]]:
    """A tok2vec layer of a frozen ELMo biLM, a trained scalar mix of its layers and a trained projection to
    ``width`` (see the module's docstring); ``width = 0`` leaves out the projection."""
    if not model or not isinstance(model, (str, os.PathLike)):
        raise ValueError(f'{ARCHITECTURE}: give the model, a folder or Hub id (model = "path/or/id"), got {model!r}.')
    if isinstance(width, bool) or not isinstance(width, int) or width < 0:
        raise ValueError(f"{ARCHITECTURE}: width must be a positive integer (0: no projection), got {width!r}.")
    if projection not in PROJECTIONS:
        raise ValueError(f"{ARCHITECTURE}: projection must be one of {', '.join(PROJECTIONS)}, got {projection!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{ARCHITECTURE}: batch_size must be a positive integer, got {batch_size!r}.")
    mix = elmo_scalar_mix(FrozenBiLM(os.fspath(model), batch_size=batch_size, device=str(device)))
    if width == 0:
        return mix
    layer = Maxout(nO=width, nP=3, normalize=True) if projection == "maxout" else Linear(nO=width)
    return chain(mix, with_array(layer))


def bilm_of(tok2vec: Model) -> FrozenBiLM:
    """The `FrozenBiLM` of an ``elmo.Tok2Vec.v1`` layer (or of a model holding one, e.g. a tagger's)."""
    for node in tok2vec.walk():
        if node.name == "elmo_scalar_mix":
            return node.attrs["bilm"]
    raise ValueError(f"{tok2vec.name} holds no {ARCHITECTURE} layer.")


__all__ = ["ARCHITECTURE", "FrozenBiLM", "bilm_of", "elmo_scalar_mix", "elmo_tok2vec"]
