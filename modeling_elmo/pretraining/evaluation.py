"""Evaluation during and after pretraining: exact full-softmax perplexity with the unigram baseline
(`modeling_elmo.evaluation.lm_scoring`), its ``metrics.jsonl`` record, and the perplexity plot.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..evaluation.lm_scoring import UnigramBaseline, score_batches
from ..folders.files import atomic_output
from ..utils.results import PerplexityResult, data_file_label
from .batching import BucketBatchSampler, Collator, FixedBatches, IndexedDataset, example_lengths, iter_stream_batches
from .options import PretrainingArguments
from .state import read_metrics


def dataset_description(args: PretrainingArguments, split: str) -> str:
    """What the ``split`` data is, for the results file: its file names, the Hub dataset, or the held-out share."""
    files = {"validation": args.validation_file, "test": args.test_file}.get(split)
    if files:
        return ", ".join(data_file_label(f) for f in files)
    if args.dataset_name:
        return " ".join(filter(None, (Path(args.dataset_name).name, args.dataset_config_name)))
    names = ", ".join(data_file_label(f) for f in args.train_file or [])
    return f"{names} ({args.validation_split_percentage:g}% of the lines held out)"


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    dataset: Any,
    collator: Collator,
    accelerator: Any,
    *,
    batch_size: int,
    layout: str,
    bucket_size: int,
    num_workers: int = 0,
    baseline: UnigramBaseline | None = None,
    split: str = "validation",
    description: str = "",
) -> PerplexityResult:
    """Exact full-softmax perplexity of ``dataset`` (each process scores its share; the totals are reduced), with the
    unigram ``baseline``'s when given, through the scoring loop of ``elmo evaluate`` (`lm_scoring.score_batches`)."""
    import datasets

    shard = dict(rank=accelerator.process_index, num_replicas=accelerator.num_processes, shuffle=False, drop_last=False)
    if isinstance(dataset, datasets.IterableDataset):  # not shuffled: the seed does not matter
        batches: Iterator = map(collator, iter_stream_batches(dataset, batch_size, seed=0, epoch=0, **shard))
    else:
        sampler = BucketBatchSampler(example_lengths(dataset), batch_size, bucket_size=bucket_size, **shard)
        batches = iter(
            torch.utils.data.DataLoader(
                IndexedDataset(dataset),
                batch_sampler=FixedBatches(sampler.rank_batches(0)),
                collate_fn=collator,
                num_workers=num_workers,
            )
        )
    device, autocast = accelerator.device, accelerator.autocast
    accumulator = score_batches(model, batches, layout=layout, baseline=baseline, device=device, autocast=autocast)
    if accelerator.num_processes > 1:
        accumulator = accumulator.from_tensor(
            accelerator.reduce(accumulator.to_tensor(accelerator.device), reduction="sum").cpu()
        )
    return accumulator.result(dataset=description, split=split)


def metrics_record(result: PerplexityResult) -> dict[str, float]:
    """The perplexities of ``result`` as a flat ``metrics.jsonl`` record."""
    record = {
        "perplexity": result.average,
        "perplexity_forward": result.forward,
        "perplexity_backward": result.backward,
    }
    if result.unigram is not None:
        record["unigram_perplexity"] = result.unigram.average
    return record


def plot_perplexity(metrics_path: Path, out_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    train = {r["step"]: r["train_ppl"] for r in records if "train_ppl" in r}
    valid = {r["step"]: r["perplexity"] for r in records if r.get("split") == "validation"}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for values, style, label in ((train, "-", "train (training loss)"), (valid, "o-", "validation (exact)")):
        if values:
            ax.plot(sorted(values), [values[s] for s in sorted(values)], style, label=label)
    ax.set(xlabel="update", ylabel="perplexity (geometric mean of directions)", yscale="log", title="ELMo pretraining")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        with atomic_output(out_path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100)
    finally:
        plt.close(fig)
