"""Cached ELMo features for training task heads with `transformers.Trainer`.

The paper's recipe for a frozen biLM: run the language model once over the task data, keep its L + 1 layer
activations, then train only the scalar mix and the classifier on those numbers. `add_elmo_features` stores the
activations as a column of a `datasets.Dataset`; `ElmoFeatureCollator` pads them into the ``elmo_hidden_states``
(batch, L + 1, tokens, 2P) and ``attention_mask`` (batch, tokens) that `ElmoForSequenceClassification` and
`ElmoForTokenClassification` accept instead of ``input_ids``. With dropout 0 this trains exactly like the end-to-end
model with ``freeze_elmo=True``, at a fraction of the cost per epoch.

```python
>>> ds = add_elmo_features(ds, "path/to/elmo", words_column="tokens", batch_size=64)   # doctest: +SKIP
>>> trainer = Trainer(model=ElmoForTokenClassification.from_pretrained("path/to/elmo", num_labels=17),
...                   args=TrainingArguments(...),
...                   train_dataset=ds, data_collator=ElmoFeatureCollator())              # doctest: +SKIP
```

Storage: Arrow lets only the first dimension of an array column vary, so each example's features are stored
token-major, ``(tokens, num_layers, 2P)``; the collator transposes them. Size: ``tokens x (L + 1) x 2P`` numbers per
example (3 x 1024 for the original model: 12 KiB per token in float32, 6 KiB in float16).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import datasets
import numpy as np
import torch

from .inference import ElmoEmbedder, weights_fingerprint

FEATURE_COLUMN = "elmo_hidden_states"
STORAGE_DTYPES = ("float32", "float16")


def _selected_layers(layers: Sequence[int] | None, num_layers: int) -> list[int]:
    selected = list(range(num_layers)) if layers is None else [int(i) for i in layers]
    bad = [i for i in selected if not 0 <= i < num_layers]
    if bad or not selected or len(set(selected)) != len(selected):
        raise ValueError(f"layers must be distinct indices in [0, {num_layers}), got {list(layers or [])!r}.")
    return selected


def add_elmo_features(
    dataset: datasets.Dataset,
    model_or_path: torch.nn.Module | str,
    tokenizer: Any = None,
    *,
    text_column: str | None = None,
    words_column: str | None = None,
    batch_size: int = 32,
    layers: Sequence[int] | None = None,
    dtype: str = "float32",
    feature_column: str = FEATURE_COLUMN,
    device: str | torch.device | None = None,
    compute_dtype: torch.dtype = torch.float32,
    show_progress: bool = True,
    **map_kwargs: Any,
) -> datasets.Dataset:
    """Add the frozen biLM's layer activations of every example as the column ``feature_column``.

    Args:
        dataset: the task data, with either raw strings (``text_column``) or word lists (``words_column``).
        model_or_path: an `ElmoModel`, a head holding one in ``.elmo``, or a folder / Hub id to load one from (with
            `modeling_elmo.embedding.inference.load_elmo_model`, which refuses weights that do not match the config).
        tokenizer: the `ElmoTokenizer`; loaded from ``model_or_path`` when that is a path, else a default one.
        text_column: column of raw strings, split with the tokenizer's pre-tokenizer (give this or
            ``words_column``; token-level labels need ``words_column`` so that they line up).
        words_column: column of lists of words.
        batch_size: sentences per forward pass (and per `datasets.Dataset.map` batch).
        layers: indices of the layers to keep (0 = character CNN, L = top LSTM); default all L + 1, which is what
            the heads expect.
        dtype: storage dtype, ``"float32"`` or ``"float16"`` (half the disk; the collator returns float32).
        device: where the model runs (default: where it is).
        compute_dtype: dtype the model runs in (bfloat16 where the device has it natively, `check_compute_dtype`;
            float16 on a GPU). A model passed in is moved to
            ``device`` and ``compute_dtype`` for the run and moved back afterwards.
        show_progress: show `datasets`' progress bar over the examples (``desc`` "ELMo features"); false silences it
            for this call even where `datasets` progress bars are on.
        map_kwargs: passed to `datasets.Dataset.map` (e.g. ``desc``, ``load_from_cache_file``).

    Returns:
        the dataset with the new column, each value of shape ``(tokens, len(layers), 2P)``, formatted so that
        this column comes back as numpy arrays.
    """
    if (text_column is None) == (words_column is None):
        raise ValueError("give exactly one of text_column (raw strings) and words_column (lists of words).")
    column = text_column or words_column
    if column not in dataset.column_names:
        raise ValueError(f"column {column!r} is not in the dataset (columns: {dataset.column_names}).")
    if feature_column in dataset.column_names:
        raise ValueError(f"the dataset already has a column {feature_column!r}.")
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"dtype must be one of {STORAGE_DTYPES}, got {dtype!r}.")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")

    restore = None
    if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
        embedder = ElmoEmbedder.from_pretrained(model_or_path, device=device, dtype=compute_dtype)
        tokenizer = tokenizer if tokenizer is not None else embedder.tokenizer
        model = embedder.model
        selected = _selected_layers(layers, embedder.num_layers)
    else:
        model = getattr(model_or_path, "elmo", model_or_path)
        selected = _selected_layers(layers, int(model.config.num_representation_layers))
        if tokenizer is None:
            from ..tokenization_elmo import ElmoTokenizer

            tokenizer = ElmoTokenizer()
        first = next(model.parameters())
        restore = (model.training, first.device, first.dtype)
        embedder = ElmoEmbedder(model, tokenizer, device=device, dtype=compute_dtype)
    np_dtype = np.dtype(dtype)
    width = embedder.output_size

    def embed(batch: dict[str, list]) -> dict[str, list]:
        if text_column is not None:
            sentences = [tokenizer.split_words(text) for text in batch[text_column]]
        else:
            sentences = [list(words) for words in batch[words_column]]
        nonempty = [i for i, s in enumerate(sentences) if s]
        outputs = embedder.embed_batch([sentences[i] for i in nonempty]) if nonempty else []
        values = [np.zeros((0, len(selected), width), dtype=np_dtype) for _ in sentences]
        for i, layers_of_i in zip(nonempty, outputs, strict=False):
            values[i] = np.ascontiguousarray(layers_of_i[selected].transpose(1, 0, 2), dtype=np_dtype)
        return {feature_column: values}

    features = dataset.features.copy()
    features[feature_column] = datasets.Array3D(shape=(None, len(selected), width), dtype=dtype)
    map_kwargs.setdefault("desc", "ELMo features")
    silence = not show_progress and datasets.is_progress_bar_enabled()
    try:
        fingerprint = hashlib.sha256(
            repr(
                (
                    dataset._fingerprint,
                    weights_fingerprint(model),
                    column,
                    text_column is not None,
                    selected,
                    dtype,
                    feature_column,
                    str(compute_dtype),
                    getattr(tokenizer, "split_pattern", None),
                    getattr(tokenizer, "do_lower_case", None),
                )
            ).encode()
        ).hexdigest()[:32]
        if silence:
            datasets.disable_progress_bars()
        result = dataset.map(
            embed,
            batched=True,
            batch_size=batch_size,
            features=features,
            new_fingerprint=map_kwargs.pop("new_fingerprint", fingerprint),
            **map_kwargs,
        )
    finally:
        if silence:
            datasets.enable_progress_bars()
        if restore is not None:  # the caller's model as it was
            training, original_device, original_dtype = restore
            model.to(device=original_device, dtype=original_dtype).train(training)
    return result.with_format("numpy", columns=[feature_column], output_all_columns=True)


class ElmoFeatureCollator:
    """Pads cached features into the inputs of the ELMo task heads.

    Each example needs ``feature_column`` (``(tokens, L + 1, 2P)`` as stored by `add_elmo_features`) and may have
    ``labels`` or ``label``: a number per sentence, or a list per token (padded with ``label_pad_token_id``).
    Returns ``elmo_hidden_states`` (batch, L + 1, tokens, 2P) float, ``attention_mask`` (batch, tokens) and
    ``labels``. Other columns are dropped.
    """

    def __init__(
        self, feature_column: str = FEATURE_COLUMN, label_pad_token_id: int = -100, dtype: torch.dtype = torch.float32
    ):
        self.feature_column = feature_column
        self.label_pad_token_id = label_pad_token_id
        self.dtype = dtype

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("cannot collate an empty list of examples.")
        if self.feature_column not in examples[0]:
            raise ValueError(
                f"examples have no {self.feature_column!r} column (keys: {sorted(examples[0])}); "
                "run add_elmo_features first."
            )
        arrays = [np.asarray(example[self.feature_column]) for example in examples]
        shape = next((a.shape[1:] for a in arrays if a.ndim == 3), None)
        if shape is None:
            raise ValueError("every example in the batch is empty; cannot infer the feature shape.")
        arrays = [a.reshape(-1, *shape) for a in arrays]
        lengths = [a.shape[0] for a in arrays]
        steps = max(max(lengths), 1)
        hidden = torch.zeros(len(arrays), shape[0], steps, shape[1], dtype=self.dtype)
        mask = torch.zeros(len(arrays), steps, dtype=torch.long)
        for i, a in enumerate(arrays):
            hidden[i, :, : lengths[i]] = torch.from_numpy(np.ascontiguousarray(a.transpose(1, 0, 2))).to(self.dtype)
            mask[i, : lengths[i]] = 1
        batch = {"elmo_hidden_states": hidden, "attention_mask": mask}
        key = "labels" if "labels" in examples[0] else "label" if "label" in examples[0] else None
        if key is not None:
            labels = [example[key] for example in examples]
            if np.ndim(labels[0]) == 0:
                batch["labels"] = torch.as_tensor(np.asarray(labels))
            else:
                padded = torch.full((len(labels), steps), self.label_pad_token_id, dtype=torch.long)
                for i, row in enumerate(labels):
                    row = torch.as_tensor(np.asarray(row), dtype=torch.long)
                    if row.shape[0] != lengths[i]:
                        raise ValueError(f"example {i} has {row.shape[0]} labels but {lengths[i]} tokens.")
                    padded[i, : lengths[i]] = row
                batch["labels"] = padded
        return batch
