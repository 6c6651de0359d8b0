"""Issue 35, S5: the datasets cache of a training file is keyed by its content, so a file replaced with one of the
same size and mtime (``cp -p``, ``rsync -t``, ``tar``) is read again, never served from the old cache."""

from __future__ import annotations

import os
import time
from pathlib import Path

from modeling_elmo.pretraining import data as pdata


def _lines(path: Path, word: str, count: int = 2000) -> None:
    path.write_text("".join(f"{word} {i:06d}\n" for i in range(count)), encoding="utf-8")


def _texts(path: Path, cache: Path) -> list[str]:
    return pdata.text_dataset_from_files([str(path)], cache_dir=str(cache))["text"]


def test_a_file_rewritten_in_place_with_its_size_and_mtime_kept_is_read_again(tmp_path):
    corpus, cache = tmp_path / "train.txt", tmp_path / "cache"
    _lines(corpus, "apple")
    stat = os.stat(corpus)
    assert _texts(corpus, cache)[0] == "apple 000000"
    time.sleep(0.05)  # as `cp -p` onto the file some time later: same inode, same size, mtime set back
    with open(corpus, "r+b") as handle:
        handle.write(b"melon")
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (os.stat(corpus).st_size, os.stat(corpus).st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    assert _texts(corpus, cache)[0] == "melon 000000"


def test_a_file_replaced_by_a_copy_of_the_same_size_and_mtime_is_read_again(tmp_path):
    corpus, cache = tmp_path / "train.txt", tmp_path / "cache"
    _lines(corpus, "apple", 50_000)
    stat = os.stat(corpus)
    assert _texts(corpus, cache)[25_000] == "apple 025000"
    staged = tmp_path / ".train.txt.rsync"  # as `rsync -t`: a new file renamed over the old one
    _lines(staged, "grape", 50_000)
    os.utime(staged, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(staged, corpus)
    assert _texts(corpus, cache)[25_000] == "grape 025000"


def test_the_unchanged_file_is_served_from_the_cache(tmp_path):
    corpus, cache = tmp_path / "train.txt", tmp_path / "cache"
    _lines(corpus, "apple")
    first = pdata.text_dataset_from_files([str(corpus)], cache_dir=str(cache))
    second = pdata.text_dataset_from_files([str(corpus)], cache_dir=str(cache))
    assert first._fingerprint == second._fingerprint and first.cache_files == second.cache_files


def test_the_content_stamp_reads_a_bounded_share_of_a_large_file(tmp_path, monkeypatch):
    big = tmp_path / "big.txt"
    with open(big, "wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB (sparse)
    read = []
    real_open = open

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, n=-1):
            data = self.handle.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.handle, name)

    monkeypatch.setattr("builtins.open", lambda *a, **k: Counting(real_open(*a, **k)))
    stamp = pdata.content_stamp(big)
    assert sum(read) == 16 * 65536
    with real_open(big, "r+b") as handle:  # a change in the last block changes the stamp
        handle.seek((1 << 30) - 10)
        handle.write(b"x")
    assert pdata.content_stamp(big) != stamp
