"""Downloading and converting the published releases (`elmo convert --release`), against a local HTTP server.

The server (stdlib ``http.server`` on 127.0.0.1, in a thread) serves a synthetic release: tiny random files in the
original layout (``numpy_reference.write_original_files``) under the real release's names, with the release table
entry swapped for one whose options and parameter count fit them. The server can drop a connection mid-body,
answer with an error status, or ignore ``Range``; every request it receives is recorded. The Hub mirror is never
reached: ``huggingface_hub.hf_hub_download`` is replaced in every test (and records its calls).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # numpy_reference, however pytest imports this file
import numpy_reference as ref  # noqa: E402

from modeling_elmo import cli
from modeling_elmo.conversion import download, releases  # noqa: E402
from modeling_elmo.conversion.download import DownloadError, download_file  # noqa: E402
from modeling_elmo.conversion.original_format import config_options  # noqa: E402
from modeling_elmo.conversion.releases import RELEASES, count_parameters, fetch_release, weights_size_bounds  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def hub_calls(monkeypatch):
    """Replace the Hub download function: it records its arguments and fails, as offline."""
    import huggingface_hub

    calls: list[dict] = []

    def offline(repo_id, filename, **kwargs):
        calls.append(dict(repo_id=repo_id, filename=filename, **kwargs))
        raise OSError("offline (test)")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    return calls


def _convert(server, tmp_path, *extra, output="out"):
    return cli.main(
        [
            "convert",
            "--release",
            "original",
            "--base-url",
            server.url,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output",
            str(tmp_path / output),
            *extra,
        ]
    )


def _error_line(excinfo) -> str:
    message = str(excinfo.value.code)
    assert message.startswith("elmo convert: error: ") and "\n" not in message, message
    return message


def _cache(tmp_path, release) -> Path:
    return tmp_path / "cache" / release.name


# ----------------------------------------------------------------------------------------------- the table
def test_release_table_options_imply_the_published_parameter_counts():
    counts = {name: count_parameters(release.options) for name, release in RELEASES.items()}
    assert counts == {"small": 13_593_296, "medium": 28_027_728, "original": 93_600_848, "original-5.5b": 93_600_848}
    assert counts == {name: release.num_parameters for name, release in RELEASES.items()}
    for release in RELEASES.values():  # the published rounded count agrees with the exact one
        assert f"{release.num_parameters / 1e6:.1f} M" == release.published_parameters
        assert set(release.sha256) == set(release.sizes) == {"options", "weights"}


def test_release_files_are_found_under_the_allennlp_layout_and_the_base_url_is_overridable(monkeypatch):
    original = RELEASES["original"]
    monkeypatch.delenv(releases.BASE_URL_ENV, raising=False)
    assert original.url("weights") == (
        "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/"
        "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"
    )
    assert (
        RELEASES["original-5.5b"]
        .url("options")
        .endswith("/2x4096_512_2048cnn_2xhighway_5.5B/elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json")
    )
    monkeypatch.setenv(releases.BASE_URL_ENV, "http://mirror.example/elmo/")
    assert original.url("options") == (
        "http://mirror.example/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
    )
    assert original.url("options", "https://other.example").startswith("https://other.example/2x4096")
    with pytest.raises(ValueError, match="'ftp://x' must start with http"):
        original.url("options", "ftp://x")


# ----------------------------------------------------------------------------------------------- end to end
def test_convert_release_downloads_converts_and_writes_a_folder_ready_for_push(
    server, served, release, tmp_path, synthetic_files, capsys
):
    from modeling_elmo import hub
    from modeling_elmo.modeling_elmo import ElmoModel

    assert _convert(server, tmp_path) == 0
    out = tmp_path / "out"
    assert [p for p, _ in server.requests] == [served["options"], served["weights"]]
    cache = _cache(tmp_path, release)
    assert (cache / release.filename("weights")).read_bytes() == synthetic_files[2]
    assert not list(cache.glob("*.part")) and not list(cache.glob(".*"))
    printed = capsys.readouterr().out
    assert f"weights: {server.url}/" in printed and f"wrote {out}" in printed

    metadata = json.loads((out / "conversion_metadata.json").read_text())
    assert metadata["release"] == "original" and metadata["validation_max_abs_difference"] <= 1e-4
    assert metadata["sources"]["weights"] == release.url("weights", server.url)
    assert metadata["sha256"][release.filename("weights")] == hashlib.sha256(synthetic_files[2]).hexdigest()
    assert metadata["published"]["srl_f1"] == 84.63 and metadata["published"]["lm_perplexity"] == 39.7
    readme = (out / "README.md").read_text()
    for figure in ("84.63", "93.85", "39.7", "93.6 M", "1B Word Benchmark", "elmo push"):
        assert figure in readme, figure
    model = ElmoModel.from_pretrained(out)
    assert config_options(model.config)["lstm"]["dim"] == synthetic_files[0]["lstm"]["dim"]

    # `elmo push --dry-run` takes the folder as it is, and its Hub card carries the published figures.
    hub_dir = tmp_path / "hub"
    assert hub.main([str(out), "--repo-id", "someone/elmo-original", "--dry-run", "--output-dir", str(hub_dir)]) == 0
    card = (hub_dir / "README.md").read_text()
    assert "converted" in card.split("---")[1]  # the YAML tags
    for figure in ("84.63", "93.85", "39.7", "1B Word Benchmark", "AllenNLP ELMo release 'original'"):
        assert figure in card, figure
    assert str(tmp_path) not in card


def test_cached_files_are_reused_without_any_request(server, served, release, tmp_path):
    assert _convert(server, tmp_path, output="first") == 0
    server.requests.clear()
    server.files.clear()  # whatever is asked for now would be a 404
    assert _convert(server, tmp_path, output="second") == 0
    assert server.requests == []
    first, second = (json.loads((tmp_path / n / "conversion_metadata.json").read_text()) for n in ("first", "second"))
    assert first["sha256"] == second["sha256"] and second["sources"] == first["sources"]


def test_force_download_fetches_the_files_again(server, served, release, tmp_path):
    fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    server.requests.clear()
    fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, force_download=True, progress=False)
    assert [p for p, _ in server.requests] == [served["options"], served["weights"]]
    assert fetched.cached == {"options": False, "weights": False}


def test_default_cache_lies_under_hf_home(server, served, release, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    fetched = fetch_release("original", base_url=server.url, progress=False)
    expected = tmp_path / "hf-home" / "modeling_elmo" / "releases" / "original"
    assert fetched.paths == {role: expected / release.filename(role) for role in ("options", "weights")}


# ----------------------------------------------------------------------------------------------- resuming
def test_interrupted_download_resumes_with_a_range_request(server, served, release, tmp_path, synthetic_files):
    weights = synthetic_files[2]
    server.drops[served["weights"]] = [10_000]
    fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, retry_wait=0, progress=False)
    assert server.requests_for(served["weights"]) == [None, "bytes=10000-"]
    assert fetched.paths["weights"].read_bytes() == weights
    assert not Path(str(fetched.paths["weights"]) + ".part").exists()


def test_failed_run_keeps_the_part_file_and_the_next_run_resumes_it(server, served, release, tmp_path, synthetic_files):
    server.drops[served["weights"]] = [7_000, 5_000, 3_000]  # three attempts, each cut short
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path)
    message = _error_line(excinfo)
    assert release.filename("weights") in message and server.url in message
    assert "the connection broke after 15,000 of" in message and "next run resumes" in message
    assert not (tmp_path / "out").exists()
    part = _cache(tmp_path, release) / (release.filename("weights") + ".part")
    assert part.read_bytes() == synthetic_files[2][:15_000]
    assert not (_cache(tmp_path, release) / release.filename("weights")).exists()

    server.requests.clear()
    assert _convert(server, tmp_path) == 0
    assert server.requests == [(served["weights"], "bytes=15000-")]  # the options were complete already
    assert not part.exists() and (tmp_path / "out" / "model.safetensors").is_file()


def test_server_that_ignores_range_gives_a_complete_file(server, served, release, tmp_path, synthetic_files):
    server.ignore_range = True
    server.drops[served["weights"]] = [4_000]
    fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, retry_wait=0, progress=False)
    assert server.requests_for(served["weights"]) == [None, "bytes=4000-"]
    assert fetched.paths["weights"].read_bytes() == synthetic_files[2]


# ----------------------------------------------------------------------------------------------- bad files
def test_body_shorter_than_its_content_length_is_an_error_naming_the_file_and_the_url(server, served, tmp_path):
    url = server.url.split("/models")[0] + served["options"]
    server.drops[served["options"]] = [100]
    destination = tmp_path / "options.json"
    with pytest.raises(DownloadError) as excinfo:
        download_file(url, destination, attempts=1, progress=False)
    total = len(server.files[served["options"]])
    assert (
        f"cannot download options.json from {url} (1 attempts): the connection broke after 100 of {total:,} "
        "bytes" in str(excinfo.value)
    )
    assert not destination.exists() and Path(str(destination) + ".part").stat().st_size == 100


def test_size_different_from_the_known_size_is_refused_before_the_body_is_read(
    server, served, release, tmp_path, monkeypatch, synthetic_files
):
    size = len(synthetic_files[2])
    monkeypatch.setitem(
        RELEASES, "original", dataclasses.replace(release, sizes={"options": None, "weights": size + 8})
    )
    server.drops[served["weights"]] = [0]  # the announced size must be enough to refuse the file
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path)
    message = _error_line(excinfo)
    assert (
        f"{release.filename('weights')} at {release.url('weights', server.url)}: the server announces "
        f"{size:,} bytes where the release's file has {size + 8:,}" in message
    )
    assert len(server.requests_for(served["weights"])) == 1  # not retried
    assert not list(_cache(tmp_path, release).glob("*weights*")) and not (tmp_path / "out").exists()


def test_weights_too_small_for_the_parameter_count_are_refused(server, served, release, tmp_path):
    low, _ = weights_size_bounds(release.num_parameters)
    server.files[served["weights"]] = server.files[served["weights"]][: low - 1]  # a file cut at the source
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path)
    assert (
        f"the server announces {low - 1:,} bytes, too small for the release's {release.num_parameters:,} "
        "float32 parameters" in _error_line(excinfo)
    )
    assert not (tmp_path / "out").exists()


def test_known_sha256_mismatch_is_refused_and_nothing_is_kept(
    server, served, release, tmp_path, monkeypatch, synthetic_files
):
    wrong = "0" * 64
    monkeypatch.setitem(RELEASES, "original", dataclasses.replace(release, sha256={"options": None, "weights": wrong}))
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path)
    actual = hashlib.sha256(synthetic_files[2]).hexdigest()
    assert f"has sha256 {actual}, the release's file has {wrong}" in _error_line(excinfo)
    assert not list(_cache(tmp_path, release).glob("*weights*")), "a file that failed its check was kept"

    monkeypatch.setitem(RELEASES, "original", dataclasses.replace(release, sha256={"options": None, "weights": actual}))
    assert _convert(server, tmp_path) == 0


def test_options_of_another_model_are_refused(server, served, release, tmp_path):
    other = ref.tiny_options(dim=32)
    server.files[served["options"]] = json.dumps(other).encode()
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path)
    message = _error_line(excinfo)
    assert release.filename("options") in message
    assert "holds the options of another model (n_layers=2, dim=32" in message
    assert "release 'original' has n_layers=2, dim=24" in message
    assert not list(_cache(tmp_path, release).iterdir()) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("status, retried", [(404, False), (500, True)])
def test_server_error_is_one_error_line_naming_the_url(
    server, served, release, tmp_path, status, retried, hub_calls, monkeypatch
):
    monkeypatch.setattr(download.time, "sleep", lambda seconds: None)
    server.status[served["weights"]] = status
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path, "--no-mirror")
    message = _error_line(excinfo)
    assert f"cannot download {release.filename('weights')} from {release.url('weights', server.url)}" in message
    assert f"HTTP {status}" in message
    assert len(server.requests_for(served["weights"])) == (download.DEFAULT_ATTEMPTS if retried else 1)
    assert hub_calls == [] and not (tmp_path / "out").exists()
    assert sorted(p.name for p in _cache(tmp_path, release).iterdir()) == [
        release.filename("options"),
        release.filename("options") + ".source",
    ]


@pytest.mark.slow
def test_network_error_prints_exactly_one_line_from_the_command(server, tmp_path):
    """The real `small` release against a server that has nothing: stderr is one line, no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", NO_PROXY="127.0.0.1", HF_HOME=str(tmp_path / "hf"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "modeling_elmo.cli",
            "convert",
            "--release",
            "small",
            "--base-url",
            server.url,
            "--output",
            str(tmp_path / "out"),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    url = RELEASES["small"].url("options", server.url)
    assert result.stderr.splitlines() == [
        f"elmo convert: error: cannot download {RELEASES['small'].filename('options')} from {url}: HTTP 404 Not Found."
    ]
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------- the mirror
def test_mirror_is_used_when_the_primary_server_fails(server, served, release, tmp_path, monkeypatch, synthetic_files):
    import huggingface_hub

    server.status[served["weights"]] = 404
    calls = []

    def mirror(repo_id, filename, *, revision=None, local_dir=None, **kwargs):
        calls.append((repo_id, filename))
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(synthetic_files[2])
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", mirror)
    assert _convert(server, tmp_path) == 0
    assert calls == [("lysandre/elmo-2x4096_512_2048cnn_2xhighway", "weights.hdf5")]
    metadata = json.loads((tmp_path / "out" / "conversion_metadata.json").read_text())
    assert metadata["sources"] == {
        "options": release.url("options", server.url),
        "weights": "hf://lysandre/elmo-2x4096_512_2048cnn_2xhighway/weights.hdf5",
    }
    cache = _cache(tmp_path, release)
    assert (cache / release.filename("weights")).read_bytes() == synthetic_files[2]
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith(".")) == []  # the mirror's staging is gone
    # the cache remembers where the file came from
    again = fetch_release(release, cache.parent, base_url=server.url, progress=False)
    assert again.sources["weights"] == metadata["sources"]["weights"] and again.cached["weights"]


def test_failing_mirror_and_server_are_both_named_in_one_line(server, served, release, tmp_path, hub_calls):
    server.status[served["weights"]] = 404
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path)
    message = _error_line(excinfo)
    assert (
        f"{release.url('weights', server.url)}: HTTP 404 Not Found; the Hub mirror "
        "hf://lysandre/elmo-2x4096_512_2048cnn_2xhighway/weights.hdf5 failed: OSError: offline (test)" in message
    )
    assert [(c["repo_id"], c["filename"]) for c in hub_calls] == [
        ("lysandre/elmo-2x4096_512_2048cnn_2xhighway", "weights.hdf5")
    ]
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------- the output
def test_unwritable_output_is_refused_before_anything_is_downloaded(server, served, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(SystemExit) as excinfo:
        _convert(server, tmp_path, output="a-file/out")
    assert "a-file" in _error_line(excinfo) and "is a file, not a folder" in str(excinfo.value.code)
    assert server.requests == [] and not (tmp_path / "cache").exists()


def test_release_cannot_be_combined_with_local_files(tmp_path, capsys):
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["convert", "--release", "small", "--options", "o.json", "--output", str(tmp_path / "out")])
    assert excinfo.value.code == 2
    assert "do not combine it with --options/--weights" in capsys.readouterr().err


def test_complete_part_file_is_finished_after_a_416_answer(server, served, release, tmp_path, synthetic_files):
    """A run stopped between the last byte and the rename: the server has nothing more to send (HTTP 416)."""
    real_replace = os.replace

    def killed_before_the_rename(src, dst, **where):  # (renames in the cache are relative to its open folder)
        if str(src).endswith("weights.hdf5.part"):
            raise KeyboardInterrupt("killed")
        real_replace(src, dst, **where)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(download.os, "replace", killed_before_the_rename)
        with pytest.raises(KeyboardInterrupt):
            fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    part = _cache(tmp_path, release) / (release.filename("weights") + ".part")
    assert part.read_bytes() == synthetic_files[2]
    server.requests.clear()
    fetched = fetch_release(release, tmp_path / "cache", base_url=server.url, progress=False)
    assert server.requests_for(served["weights"]) == [f"bytes={len(synthetic_files[2])}-"]
    assert fetched.paths["weights"].read_bytes() == synthetic_files[2]
