"""`elmo convert` refuses declared sizes that the files cannot back and tolerances that cannot work, before any
work or allocation: a small ``weights.hdf5`` declaring huge chunked datasets, an ``options.json`` of 10^9 filters,
``--atol nan``."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy_reference as ref  # noqa: E402

from modeling_elmo import cli  # noqa: E402
from modeling_elmo.conversion.convert import convert, convert_config, convert_state_dict, expected_dataset_shapes  # noqa: E402


def _error_line(argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["convert", *argv])
    message = str(exit_.value.code)
    assert message.startswith("elmo convert: error: ") and "\n" not in message, message
    return message


def _hollow_release(folder: Path, filters: list[list[int]]) -> tuple[Path, Path]:
    """An options.json with ``filters`` and a weights.hdf5 declaring every dataset it implies as chunked datasets
    with no chunk written (a file of a few KB whose datasets claim gigabytes)."""
    options = ref.tiny_options(filters=filters, n_highway=1)
    folder.mkdir()
    options_path = folder / "options.json"
    options_path.write_text(json.dumps(options))
    weights = folder / "weights.hdf5"
    with h5py.File(weights, "w") as h5:
        for name, shape in expected_dataset_shapes(convert_config(options)).items():
            h5.create_dataset(name, shape=shape, dtype="f4", chunks=tuple(min(n, 64) for n in shape))
    return options_path, weights


def test_weights_declaring_more_than_the_file_stores_are_refused_before_reading(tmp_path):
    options, weights = _hollow_release(tmp_path / "hollow", [[1, 15_000]])
    assert weights.stat().st_size < 100_000  # datasets of 15,000 x 15,000 floats declared: 900 MB each
    limit = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(Path("/proc/self/status").read_text().split("VmSize:")[1].split()[0]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (in_use + (1 << 30), limit[1]))  # reading the values would need ~2 GB
    try:
        message = _error_line(["--options", str(options), "--weights", str(weights), "--output", str(tmp_path / "out")])
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limit)
    assert f"weights file {str(weights)!r} is damaged or truncated (dataset " in message
    assert "bytes of values but the file stores 0 for it)" in message, message
    assert not (tmp_path / "out").exists()


def test_compressed_weights_still_convert(tmp_path):
    options = ref.tiny_options()
    options_path, weights_path = ref.write_original_files(tmp_path / "plain", options, seed=3)
    packed = tmp_path / "packed.hdf5"
    with h5py.File(weights_path, "r") as src, h5py.File(packed, "w") as dst:

        def copy(name, obj):
            if isinstance(obj, h5py.Dataset):
                dst.create_dataset(name, data=obj[()], compression="gzip", shuffle=True)

        src.visititems(copy)
    plain = convert_state_dict(weights_path, convert_config(options))
    again = convert_state_dict(packed, convert_config(options))
    assert plain.keys() == again.keys()
    for name in plain:
        np.testing.assert_array_equal(again[name].numpy(), plain[name].numpy(), err_msg=name)


def test_options_declaring_a_billion_filters_are_one_line(tmp_path):
    options = ref.tiny_options(filters=[[1, 10**9]])
    (tmp_path / "options.json").write_text(json.dumps(options))
    (tmp_path / "weights.hdf5").write_bytes(b"")
    message = _error_line(
        [
            "--options",
            str(tmp_path / "options.json"),
            "--weights",
            str(tmp_path / "weights.hdf5"),
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert "options.json describes a model of 4e+18 parameters (char_cnn_filters: 1,000,000,000 filters" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("atol", ["nan", "-1", "0", "inf"])
def test_atol_that_cannot_work_is_refused_before_any_work(tmp_path, atol, monkeypatch):
    options_path, weights_path = ref.write_original_files(tmp_path / "src", ref.tiny_options(), seed=1)
    read = []
    monkeypatch.setattr("modeling_elmo.conversion.convert.read_options", lambda path: read.append(path))
    message = _error_line(
        ["--options", options_path, "--weights", weights_path, "--output", str(tmp_path / "out"), "--atol", atol]
    )
    assert message == (
        f"elmo convert: error: --atol must be a finite number > 0 (the largest accepted difference to "
        f"the reference), got {float(atol)!r}."
    )
    assert read == [] and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="--atol must be a finite number > 0"):
        convert(options_path, weights_path, tmp_path / "out", atol=float(atol))


def test_atol_is_checked_before_a_release_is_downloaded(tmp_path, server, served):
    message = _error_line(
        [
            "--release",
            "original",
            "--base-url",
            server.url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output",
            str(tmp_path / "out"),
            "--atol",
            "nan",
        ]
    )
    assert "--atol must be a finite number > 0" in message
    assert server.requests == [] and not (tmp_path / "cache").exists()
