"""Batching for ELMo pretraining: length-bucketed, sharded batches of a number of sentences or of a token budget
(a pure function of the lengths, seed and epoch, so a resumed run skips those already seen), the collator that builds
model inputs, and the streaming equivalent.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..tokenization_elmo import UNK_ID, CharacterAlphabet


def example_lengths(dataset: Any) -> np.ndarray:
    """The ``length`` column as an int64 numpy array."""
    column = dataset.with_format("arrow")["length"]  # a pyarrow array: no per-row Python work
    return np.asarray(column.to_numpy() if hasattr(column, "to_numpy") else column, dtype=np.int64)


# ----------------------------------------------------------------------------------------------- batching
def cut_batches(
    order: np.ndarray, lengths: np.ndarray, batch_size: int | None, max_tokens: int | None
) -> list[np.ndarray]:
    """Cut the length-sorted ``order`` into batches of ``batch_size`` examples, or of as many as fit in ``max_tokens``
    padded tokens (a longer example forms a batch of its own)."""
    if max_tokens is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches, start, longest = [], 0, 0
    for i, index in enumerate(order):
        longest_with = max(longest, int(lengths[index]))
        if i > start and longest_with * (i - start + 1) > max_tokens:
            batches.append(order[start:i])
            start, longest_with = i, int(lengths[index])
        longest = longest_with
    if start < len(order):
        batches.append(order[start:])
    return batches


class BucketBatchSampler:
    """Deterministic, length-bucketed, sharded batches: for epoch ``e`` the examples are permuted with
    ``default_rng([seed, e])``, cut into pools of ``bucket_size`` batches' worth, sorted by length inside each pool,
    cut (`cut_batches`) and the batches shuffled again. Process ``rank`` takes batches ``rank, rank + num_replicas,
    ...``; with ``drop_last`` every process gets the same number (as DDP needs)."""

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        num_replicas: int = 1,
        bucket_size: int = 100,
        drop_last: bool = True,
    ):
        if (batch_size is None) == (max_tokens is None):
            raise ValueError("give exactly one of batch_size and max_tokens.")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}.")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas}).")
        self.lengths, self.batch_size, self.max_tokens = np.asarray(lengths, dtype=np.int64), batch_size, max_tokens
        self.shuffle, self.seed, self.rank, self.num_replicas = shuffle, seed, rank, num_replicas
        self.bucket_size, self.drop_last = max(1, bucket_size), drop_last
        self._cache: tuple[int, list[list[int]]] | None = None

    def _pool_size(self) -> int:
        if self.batch_size is not None:
            return self.batch_size * self.bucket_size
        mean = float(self.lengths.mean()) if len(self.lengths) else 1.0
        return max(1, int(self.bucket_size * self.max_tokens / max(mean, 1.0)))

    def global_batches(self, epoch: int) -> list[np.ndarray]:
        n = len(self.lengths)
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        pool = self._pool_size()
        batches: list[np.ndarray] = []
        for start in range(0, n, pool):
            chunk = order[start : start + pool]
            if self.bucket_size > 1 or self.max_tokens is not None:
                chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches.extend(cut_batches(chunk, self.lengths, self.batch_size, self.max_tokens))
        if self.drop_last and self.batch_size is not None and batches and len(batches[-1]) < self.batch_size:
            # Pools are full except the last, so only the very last batch can be short.
            batches.pop()
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def rank_batches(self, epoch: int) -> list[list[int]]:
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        batches = self.global_batches(epoch)
        if self.drop_last:
            batches = batches[: len(batches) - len(batches) % self.num_replicas]
        mine = [b.tolist() for b in batches[self.rank :: self.num_replicas]]
        self._cache = (epoch, mine)
        return mine

    def num_batches(self) -> int:
        """Batches per epoch for this process (with a token budget: epoch 0's)."""
        if self.max_tokens is not None:
            return len(self.rank_batches(0))
        full = (math.floor if self.drop_last else math.ceil)(len(self.lengths) / self.batch_size)
        if self.drop_last:
            return full // self.num_replicas
        return len(range(self.rank, full, self.num_replicas))


class FixedBatches:
    """A batch sampler over a precomputed list of batches (the remainder of an epoch after a resume)."""

    def __init__(self, batches: list[list[int]]):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


@dataclass
class Collator:
    """Pad tokenised examples into ``input_ids`` (B, T, 50) character ids, ``attention_mask``, ``labels`` (-100 at
    padding), ``lengths`` and ``example_ids`` (when the examples carry an ``index``)."""

    char_table: np.ndarray
    pad_to_multiple_of: int | None = None
    characters: list[str] | None = None  # a Unicode character vocabulary (ids 7 on); None: bytes
    _alphabet: CharacterAlphabet = field(init=False)

    def __post_init__(self):
        self._alphabet = CharacterAlphabet(self.characters, self.char_table.shape[1])

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        lengths = [len(ex["word_ids"]) for ex in examples]
        T = max(max(lengths), 1)
        if self.pad_to_multiple_of:
            T = -(-T // self.pad_to_multiple_of) * self.pad_to_multiple_of
        B = len(examples)
        word_ids = np.zeros((B, T), dtype=np.int64)
        for b, ex in enumerate(examples):
            word_ids[b, : lengths[b]] = ex["word_ids"]
        chars = self.char_table[word_ids]  # (B, T, 50); <pad> rows are zeros
        unknown = np.argwhere(word_ids == UNK_ID)
        if len(unknown):
            oov_words = [w for ex in examples for w in ex["oov"]]
            if len(oov_words) != len(unknown):
                raise ValueError(
                    f"corrupt example: {len(unknown)} <UNK> ids but {len(oov_words)} stored out-of-vocabulary words."
                )
            chars[unknown[:, 0], unknown[:, 1]] = self._alphabet.encode(oov_words)
        mask = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
        labels = np.where(mask, word_ids, -100)
        batch = {
            "input_ids": torch.from_numpy(chars),
            "attention_mask": torch.from_numpy(mask.astype(np.int64)),
            "labels": torch.from_numpy(labels),
            "lengths": torch.tensor(lengths, dtype=torch.long),
        }
        if examples and "index" in examples[0]:
            batch["example_ids"] = torch.tensor([ex["index"] for ex in examples], dtype=torch.long)
        return batch


class IndexedDataset(torch.utils.data.Dataset):
    """A map-style ``datasets.Dataset`` whose items also carry their ``index`` (for logging who saw what)."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = dict(self.dataset[int(index)])
        item["index"] = int(index)
        return item

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        rows = self.dataset[[int(i) for i in indices]]
        return [
            {"word_ids": ids, "oov": oov, "index": int(i)}
            for ids, oov, i in zip(rows["word_ids"], rows["oov"], indices, strict=False)
        ]


def iter_stream_batches(
    dataset: Any,
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    rank: int,
    num_replicas: int,
    shuffle: bool,
    buffer_batches: int = 100,
    drop_last: bool = True,
    max_tokens: int | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Batches from an ``IterableDataset``: this process's shard, a seeded shuffle buffer, then length bucketing in
    pools of ``buffer_batches`` batches (`cut_batches`); deterministic given ``seed`` and ``epoch``."""
    from datasets.distributed import split_dataset_by_node

    ds = split_dataset_by_node(dataset, rank=rank, world_size=num_replicas) if num_replicas > 1 else dataset
    if shuffle:
        ds = ds.shuffle(seed=seed, buffer_size=max(batch_size * buffer_batches, 1000))
        ds.set_epoch(epoch)
    rng = np.random.default_rng([seed, epoch, rank])
    pool: list[dict[str, Any]] = []

    def flush(pool: list[dict[str, Any]], final: bool) -> Iterator[list[dict[str, Any]]]:
        pool = sorted(pool, key=lambda ex: len(ex["word_ids"]))
        lengths = np.array([len(ex["word_ids"]) for ex in pool], dtype=np.int64)
        cuts = cut_batches(np.arange(len(pool)), lengths, None if max_tokens else batch_size, max_tokens)
        batches = [[pool[i] for i in cut] for cut in cuts]
        if final and drop_last and max_tokens is None and batches and len(batches[-1]) < batch_size:
            batches.pop()
        order = rng.permutation(len(batches)) if shuffle else range(len(batches))
        for i in order:
            yield batches[i]

    for example in ds:
        if not example["word_ids"]:
            continue
        pool.append({"word_ids": example["word_ids"], "oov": example["oov"]})
        if len(pool) >= batch_size * buffer_batches:
            yield from flush(pool, final=False)
            pool = []
    if pool:
        yield from flush(pool, final=True)
