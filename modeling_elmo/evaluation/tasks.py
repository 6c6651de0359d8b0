"""The evaluation tasks: perplexity (with a unigram baseline, both from `modeling_elmo.evaluation.lm_scoring`), the
nearest-neighbour sense probe and linear probes (sentiment, POS) trained with `transformers.Trainer` on cached
frozen features.

Every task takes an already loaded model and tokenizer. Perplexity returns a `PerplexityResult`; the probes return
plain dicts (JSON-serialisable) that `modeling_elmo.evaluation.report` turns into score records. The long steps
(the unigram fit, perplexity, feature extraction, probe training) show tqdm progress bars on stderr unless
``progress=False``."""

from __future__ import annotations

import logging
import math
import tempfile
import time
from collections import Counter
from typing import Any, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..embedding.inference import model_inputs
from ..utils.results import PerplexityResult
from .data import WsdOccurrence
from .lm_scoring import MAX_SCORED_POSITIONS, UnigramBaseline, score_batches, target_counts
from .metrics import accuracy, correctness, masked_token_accuracy
from .wsd import score_nearest_neighbour

logger = logging.getLogger(__name__)

__all__ = [
    "compute_layer_features",
    "fit_unigram_baseline",
    "lm_perplexity",
    "wsd_probe",
    "CachedFeatureDataset",
    "feature_statistics",
    "train_probe",
    "probe_task",
    "scalar_mix_weights",
]


def _batches(order: Sequence[int], batch_size: int):
    for start in range(0, len(order), batch_size):
        yield list(order[start : start + batch_size])


def _device_of(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


# ------------------------------------------------------------------------------------------- features
@torch.no_grad()
def compute_layer_features(
    model: torch.nn.Module,
    tokenizer: Any,
    sentences: Sequence[Sequence[str]],
    batch_size: int = 32,
    dtype: torch.dtype = torch.float16,
    progress: bool = True,
    desc: str = "features",
) -> list[torch.Tensor]:
    """Run the frozen `ElmoModel` once per sentence and return its layers.

    Returns one tensor per sentence of shape (L+1, T_i, 2P) (boundaries removed, no padding), stored in
    ``dtype`` on the CPU. Sentences are batched by length (the model is stateless: a sentence's vectors do not
    depend on its batch).
    """
    model.eval()
    device = _device_of(model)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out: list[torch.Tensor | None] = [None] * len(sentences)
    bar = tqdm(total=len(sentences), desc=desc, unit="sentence", disable=not progress, dynamic_ncols=True)
    for batch in _batches(order, batch_size):
        bar.update(len(batch))
        words = [list(sentences[i]) for i in batch]
        enc = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
        outputs = model(**model_inputs(enc, device), output_hidden_states=True, return_dict=True)
        layers = torch.stack(tuple(outputs.hidden_states), dim=1)  # (B, L+1, T, 2P)
        for b, i in enumerate(batch):
            out[i] = layers[b, :, : len(sentences[i])].to(dtype=dtype, device="cpu").clone()
    bar.close()
    return out  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------- perplexity
def fit_unigram_baseline(
    tokenizer: Any, sentences: Sequence[Sequence[str]], *, fitted_on: str, smoothing: float = 1.0, progress: bool = True
) -> UnigramBaseline:
    """The unigram baseline of `modeling_elmo.evaluation.lm_scoring` fitted on ``sentences`` (words outside the
    tokenizer's
    vocabulary count as ``<UNK>``). Fitted on the evaluation sentences themselves it is an optimistic "oracle"."""
    word_ids = (
        tokenizer.word_ids_of(list(s))
        for s in tqdm(sentences, desc="unigram fit", unit="sentence", disable=not progress, dynamic_ncols=True)
    )
    return UnigramBaseline.fit(
        target_counts(word_ids, int(tokenizer.vocab_size)), fitted_on=fitted_on, smoothing=smoothing
    )


@torch.no_grad()
def lm_perplexity(
    lm: torch.nn.Module,
    tokenizer: Any,
    sentences: Sequence[Sequence[str]],
    *,
    dataset: str,
    split: str = "held-out",
    baseline: UnigramBaseline | None = None,
    batch_size: int = 32,
    progress: bool = True,
    max_positions: int = MAX_SCORED_POSITIONS,
) -> PerplexityResult:
    """Forward, backward and averaged perplexity of an `ElmoForBidirectionalLM` with the exact full softmax, and
    the unigram ``baseline``'s on the same targets (see `modeling_elmo.evaluation.lm_scoring`).

    Each sentence is scored on its own (stateless, boundaries added by the model): n + 1 targets per direction.
    Words outside the model's vocabulary are targets as ``<UNK>``; the result's ``unk_rate`` says how many. Scoring
    runs through `modeling_elmo.evaluation.lm_scoring.score_batches`: memory is bounded by ``max_positions``, not by the
    length of a line (a long line is scored in chunks, with the same result)."""
    config = lm.config
    if getattr(config, "vocab_size", 4) <= 4 or not hasattr(lm, "softmax"):
        raise ValueError(
            f"the model has no language-model head over a word vocabulary "
            f"(vocab_size={getattr(config, 'vocab_size', None)}): "
            "perplexity needs a model trained with a word vocabulary"
        )
    if getattr(tokenizer, "vocab_size", 0) != config.vocab_size:
        raise ValueError(
            f"the tokenizer's vocabulary has {getattr(tokenizer, 'vocab_size', None)} words but the model's softmax "
            f"has {config.vocab_size}: save the tokenizer (vocab.txt) with the model"
        )
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    bar = tqdm(total=len(sentences), desc="perplexity", unit="sentence", disable=not progress, dynamic_ncols=True)

    def batches():
        for batch in _batches(order, batch_size):
            enc = tokenizer(
                [list(sentences[i]) for i in batch],
                is_split_into_words=True,
                padding=True,
                return_tensors="pt",
                return_word_ids=True,
            )
            labels = enc["word_ids"].masked_fill(enc["attention_mask"] == 0, -100)
            yield {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}

    accumulator = score_batches(
        lm,
        batches(),
        layout="sentences",
        baseline=baseline,
        device=_device_of(lm),
        max_positions=max_positions,
        on_batch=lambda b: bar.update(len(b["labels"])),
    )
    bar.close()
    return accumulator.result(dataset=dataset, split=split)


# ------------------------------------------------------------------------------------------- WSD probe
def wsd_probe(
    model: torch.nn.Module,
    tokenizer: Any,
    occurrences: Sequence[WsdOccurrence],
    batch_size: int = 32,
    tie_tolerance: float = 1e-6,
    progress: bool = True,
) -> dict:
    """Nearest-neighbour sense probe per layer (see `modeling_elmo.evaluation.wsd`)."""
    feats = compute_layer_features(
        model,
        tokenizer,
        [o.tokens for o in occurrences],
        batch_size,
        dtype=torch.float32,
        progress=progress,
        desc="features wsd-probe",
    )
    words = [o.word for o in occurrences]
    senses = [o.sense for o in occurrences]
    layers = {}
    for layer in range(feats[0].shape[0]):
        vecs = np.stack([f[layer, o.index].numpy() for f, o in zip(feats, occurrences, strict=False)])
        layers[str(layer)] = score_nearest_neighbour(vecs, words, senses, tie_tolerance)
    return {
        "occurrences": len(occurrences),
        "words": sorted(set(words)),
        "senses": len(set(zip(words, senses, strict=False))),
        "tie_tolerance": tie_tolerance,
        "layers": layers,
    }


# ------------------------------------------------------------------------------------------- probes
class CachedFeatureDataset(torch.utils.data.Dataset):
    """Cached (L+1, T, 2P) features with a label per sentence (int) or per token (list of ints).

    With ``mean``/``std`` of shape (L+1, 1, 2P), items are standardised on the fly, ``(x - mean) / std``
    in float32 (the cache stays in its own dtype)."""

    def __init__(
        self,
        features: Sequence[torch.Tensor],
        labels: Sequence[Any],
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
    ):
        if len(features) != len(labels):
            raise ValueError(f"{len(features)} feature tensors but {len(labels)} labels")
        if len(features) == 0:
            raise ValueError("empty split: no examples")
        self.features = list(features)
        self.labels = list(labels)
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict:
        x = self.features[i]
        if self.mean is not None:
            x = (x.float() - self.mean) / self.std
        return {"elmo_hidden_states": x, "labels": self.labels[i]}


def feature_statistics(features: Sequence[torch.Tensor], eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation per layer and dimension over all tokens of ``features``, each of
    shape (L+1, 1, 2P) (accumulated in float64, one sentence at a time)."""
    total = sq = None
    n = 0
    for f in features:
        x = f.double()
        s1, s2 = x.sum(dim=1, keepdim=True), (x * x).sum(dim=1, keepdim=True)
        total = s1 if total is None else total + s1
        sq = s2 if sq is None else sq + s2
        n += x.shape[1]
    if not n:
        raise ValueError("no tokens to compute feature statistics from")
    mean = total / n
    var = (sq / n - mean * mean).clamp_min(0.0)
    return mean.float(), var.sqrt().clamp_min(eps).float()


def collate_cached(items: list[dict]) -> dict:
    """Pad cached features to the longest sentence: ``elmo_hidden_states`` (B, L+1, T, 2P) float32,
    ``attention_mask`` (B, T), ``labels`` (B,) or (B, T) with -100 at padding."""
    n_layers, _, dim = items[0]["elmo_hidden_states"].shape
    t_max = max(x["elmo_hidden_states"].shape[1] for x in items)
    hs = torch.zeros(len(items), n_layers, t_max, dim, dtype=torch.float32)
    mask = torch.zeros(len(items), t_max, dtype=torch.long)
    token_level = isinstance(items[0]["labels"], (list, tuple, np.ndarray, torch.Tensor))
    labels = (
        torch.full((len(items), t_max), -100, dtype=torch.long)
        if token_level
        else torch.zeros(len(items), dtype=torch.long)
    )
    for b, x in enumerate(items):
        t = x["elmo_hidden_states"].shape[1]
        hs[b, :, :t] = x["elmo_hidden_states"].float()
        mask[b, :t] = 1
        if token_level:
            labels[b, :t] = torch.as_tensor(x["labels"], dtype=torch.long)
        else:
            labels[b] = int(x["labels"])
    return {"elmo_hidden_states": hs, "attention_mask": mask, "labels": labels}


def _fixed_layer_parameters(layer: int, n_layers: int) -> list[float]:
    """Pre-softmax scalar-mix weights that select one layer exactly (softmax -> one-hot), as AllenNLP's
    ``scalar_mix_parameters``; weights and gamma are then not trained."""
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer {layer} does not exist (the model has {n_layers} representation layers)")
    return [1.0 if j == layer else -9e10 for j in range(n_layers)]


def scalar_mix_weights(head: torch.nn.Module) -> dict:
    """Softmax-normalised layer weights and gamma of a head's (first) scalar mix."""
    mix = head.scalar_mix
    return {"weights": mix.layer_weights[0].detach().float().cpu().tolist(), "gamma": float(mix.gamma[0].detach())}


def train_probe(
    head: torch.nn.Module,
    train_ds: CachedFeatureDataset,
    dev_ds: CachedFeatureDataset,
    token_level: bool,
    epochs: float = 3.0,
    learning_rate: float = 1e-2,
    batch_size: int = 32,
    seed: int = 0,
    weight_decay: float = 0.0,
    min_steps: int = 0,
) -> dict:
    """Train a probe head on cached features with `transformers.Trainer` (hyper-parameters fixed in
    advance: no model selection), then return its dev accuracy.

    ``epochs`` is raised (to a whole number) when it would give fewer than ``min_steps`` updates, so small
    training sets still get a trained probe; the epochs actually run are reported."""
    from transformers import PrinterCallback, Trainer, TrainingArguments

    steps_per_epoch = math.ceil(len(train_ds) / batch_size)
    if epochs * steps_per_epoch < min_steps:
        epochs = float(math.ceil(min_steps / steps_per_epoch))

    with tempfile.TemporaryDirectory(prefix="elmo-probe-") as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            report_to="none",
            push_to_hub=False,
            use_cpu=not torch.cuda.is_available(),
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=batch_size * 2,
            num_train_epochs=epochs,
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            lr_scheduler_type="linear",
            warmup_steps=0,
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            dataloader_num_workers=0,
            disable_tqdm=True,
            seed=seed,
            data_seed=seed,
            remove_unused_columns=False,
        )
        trainer = Trainer(model=head, args=args, train_dataset=train_ds, data_collator=collate_cached)
        trainer.remove_callback(PrinterCallback)  # it prints the final training-log dict to stdout
        t0 = time.perf_counter()
        train_out = trainer.train()
        train_s = time.perf_counter() - t0
        pred = trainer.predict(dev_ds)
    logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
    if token_level:
        acc = masked_token_accuracy(logits, pred.label_ids)
    else:
        acc = accuracy(np.asarray(logits).argmax(-1), pred.label_ids)
    # "_correct" (per dev example or token) feeds the paired comparison with an untrained model; not written out
    return {
        "accuracy": acc,
        "train_loss": float(train_out.training_loss),
        "epochs": epochs,
        "steps": int(train_out.global_step),
        "train_seconds": train_s,
        "_correct": correctness(logits, pred.label_ids),
    }


def probe_task(
    features_train: Sequence[torch.Tensor],
    labels_train: Sequence[Any],
    features_dev: Sequence[torch.Tensor],
    labels_dev: Sequence[Any],
    config: Any,
    head_class: type,
    num_labels: int,
    token_level: bool,
    layers: Sequence[int | str] | None = None,
    layer_norm: bool = True,
    standardize: bool = True,
    progress: bool = True,
    desc: str = "probes",
    **train_kwargs: Any,
) -> dict:
    """Train one linear probe per layer (0..L, scalar mix fixed to that layer) and one on the learned
    scalar mix (``"mix"``), all from the same cached features. Returns accuracies and the learned weights.

    With ``standardize`` every feature dimension of every layer is standardised with the training split's
    mean and standard deviation (dev uses the same statistics). For a one-layer probe this is an affine
    reparametrisation (same function class) that only makes the optimisation well-conditioned: a biLM's
    dimensions can have large constant offsets and tiny variation. The learned mixture then mixes
    standardised layers."""
    if not features_train or not features_dev:
        raise ValueError(f"empty split: {len(features_train)} training and {len(features_dev)} dev examples")
    n_layers = int(features_train[0].shape[0])
    layers = list(layers) if layers is not None else [*range(n_layers), "mix"]
    mean, std = feature_statistics(features_train) if standardize else (None, None)
    train_ds = CachedFeatureDataset(features_train, labels_train, mean, std)
    dev_ds = CachedFeatureDataset(features_dev, labels_dev, mean, std)
    results: dict[str, Any] = {
        "train_examples": len(train_ds),
        "dev_examples": len(dev_ds),
        "standardized": standardize,
        "layer_norm": layer_norm,
        "layers": {},
    }
    if token_level:
        results["dev_tokens"] = int(sum(len(y) for y in labels_dev))
        majority = Counter(t for y in labels_train for t in y).most_common(1)[0][0]
        results["majority_baseline"] = float(np.mean([t == majority for y in labels_dev for t in y]))
    else:
        majority = Counter(labels_train).most_common(1)[0][0]
        results["majority_baseline"] = float(np.mean([y == majority for y in labels_dev]))
    for layer in tqdm(layers, desc=desc, unit="probe", disable=not progress, dynamic_ncols=True):
        cfg = config.__class__.from_dict(config.to_dict())
        cfg.num_labels = num_labels
        cfg.scalar_mix_layer_norm = layer_norm
        cfg.classifier_dropout = 0.0
        cfg.num_output_representations = 1
        cfg.scalar_mix_parameters = None if layer == "mix" else _fixed_layer_parameters(int(layer), n_layers)
        torch.manual_seed(train_kwargs.get("seed", 0))
        head = head_class(cfg)
        out = train_probe(head, train_ds, dev_ds, token_level, **train_kwargs)
        if layer == "mix":
            out["mixture"] = scalar_mix_weights(head)
        results["layers"][str(layer)] = out
        logger.info("probe layer %s: dev accuracy %.4f", layer, out["accuracy"])
    return results
