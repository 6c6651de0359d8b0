"""``elmo embed --overwrite`` replaces only what an earlier ``elmo embed`` wrote: never a device or a FIFO (``elmo
embed in.txt /dev/null --overwrite`` as root used to replace ``/dev/null`` by a regular file), never a file of
another kind, never a ``.partial`` folder holding anything but an interrupted run's record and chunks."""

from __future__ import annotations

import os
import stat

import pytest
from support.embedding import SENTENCES, FakeEmbedder, read_h5, run

from modeling_elmo.embedding.embed import embed_file


def _device_like_dev_null(path):
    try:  # the report's /dev/null, recreated in the test's folder (character device 1:3); needs root
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device file needs root (the FIFO case runs everywhere)")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_overwrite_never_replaces_a_fifo_or_a_device(tmp_path, kind):
    special = tmp_path / "out.h5"
    os.mkfifo(special) if kind == "fifo" else _device_like_dev_null(special)
    (tmp_path / "in.txt").write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n")
    with pytest.raises(ValueError, match=f"output '{special}' exists and is not a regular file"):
        embed_file(tmp_path / "in.txt", special, FakeEmbedder(), mode="all", overwrite=True, show_progress=False)
    mode = os.lstat(special).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.h5"]


def test_overwrite_never_replaces_a_file_that_elmo_embed_did_not_write(tmp_path):
    (tmp_path / "notes.txt").write_text("my notes")
    with pytest.raises(ValueError, match="is not an HDF5 file written by elmo embed"):
        run(tmp_path, name="notes.txt", overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "my notes"
    import h5py

    with h5py.File(tmp_path / "other.h5", "w") as h5:  # an HDF5 file of someone else
        h5["x"] = [1, 2, 3]
    with pytest.raises(ValueError, match="is not an HDF5 file written by elmo embed"):
        run(tmp_path, name="other.h5", overwrite=True)
    _, out = run(tmp_path, name="mine.h5")
    run(tmp_path, name="mine.h5", overwrite=True, mode="top")  # its own output is replaced
    assert read_h5(out)["0"].ndim == 2


def test_overwrite_never_deletes_a_partial_folder_holding_other_files(tmp_path):
    partial = tmp_path / "out.h5.partial"
    partial.mkdir()
    (partial / "chunk-00000000.h5").write_bytes(b"")
    (partial / "my_results.csv").write_text("mine")
    with pytest.raises(
        ValueError,
        match=r"holds what an interrupted elmo embed run does not write \(chunk-00000000.h5, my_results.csv\)",
    ):  # a file merely named like a chunk, that no record of the run lists, is not the run's either
        run(tmp_path, overwrite=True)
    assert (partial / "my_results.csv").read_text() == "mine" and (partial / "chunk-00000000.h5").is_file()
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("option", ["resume", "overwrite", None])
def test_a_partial_folder_that_is_a_link_is_never_read_nor_written_through(tmp_path, option):
    """Attacker pass on issue 35: ``--resume`` with ``OUT.partial`` a link to another folder holding an interrupted
    run's record and chunks merged them from there, wrote its temporaries there, then stopped on ``rmtree``."""
    run(tmp_path, name="first.h5")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("the user's")
    (tmp_path / "out.h5.partial").symlink_to(elsewhere)
    with pytest.raises(ValueError, match=r"out.h5.partial', where an interrupted run's chunks are kept, is a symbolic"):
        run(tmp_path, **({option: True} if option else {}))
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"] and not (tmp_path / "out.h5").exists()
