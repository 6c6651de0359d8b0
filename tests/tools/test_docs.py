"""The documentation is written for users: the code files it says are uploaded are the ones that are, and the pages
on measurements speak of the software and the hardware, not of how the project is developed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modeling_elmo.folders.run_folder import CODE_FILES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_publishing_page_lists_exactly_the_uploaded_code_files():
    text = (DOCS / "hub.md").read_text(encoding="utf-8")
    [row] = [line for line in text.splitlines() if line.startswith("|") and "the custom code" in line]
    assert re.findall(r"`([a-z_]+\.py)`", row.split("|")[1]) == sorted(CODE_FILES)
    [paragraph] = [block for block in text.split("\n- ") if block.startswith("**What `trust_remote_code=True` runs**")]
    assert sorted(set(re.findall(r"`([a-z_]+\.py)`", paragraph.split("\n\n")[0].split("\n- ")[0]))) == sorted(
        CODE_FILES
    )


@pytest.mark.parametrize(
    "page",
    [
        "benchmarks.md",
        "evaluation.md",
        "pretraining.md",
        "conversion.md",
        "hub.md",
        "embed.md",
        "model.md",
        "security.md",
        "bad-input.md",
        "results.md",
        "internals.md",
    ],
)
def test_the_page_does_not_speak_of_how_the_project_is_developed(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    for pattern in (
        r"\bissue \d+",
        r"\(issue\b",
        r"development (session|machine)",
        r"\bdevice tool\b",
        r"\bdevice time\b",
        r"\blent the GPU\b",
        r"other engineers",
    ):
        assert not re.search(pattern, text, flags=re.I), f"{page}: {re.search(pattern, text, flags=re.I).group(0)!r}"


@pytest.mark.slow
def test_the_classifier_on_cached_features_example_runs_and_reports_accuracy(tmp_path, monkeypatch, capsys):
    """docs/embed.md's complete example, as written, next to a small saved model; `evaluate` is made unavailable
    (as offline without a cached metric, or not installed), so the numpy fallback computes the accuracy."""
    import sys

    import torch

    from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, save_model_folder

    text = (DOCS / "embed.md").read_text(encoding="utf-8")
    section = text[text.index("### A sentiment classifier on cached features") :]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    assert "compute_metrics=compute_metrics" in block and "evaluate.load" in block
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "evaluate", None)
    torch.manual_seed(0)
    config = ElmoConfig(
        projection_dim=8, cell_size=16, char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1
    )
    save_model_folder(ElmoModel(config), ElmoTokenizer(), tmp_path / "outputs" / "elmo-quickstart")
    namespace = {"__name__": "__docs__"}
    exec(compile(block, "docs/embed.md", "exec"), namespace)  # noqa: S102 (the documentation's own code)
    assert namespace["accuracy_metric"] is None
    accuracy = float(capsys.readouterr().out.strip().splitlines()[-1])
    predictions = namespace["trainer"].predict(namespace["dev"])
    expected = float((predictions.predictions.argmax(-1) == predictions.label_ids).mean())
    assert accuracy == expected and 0.0 <= accuracy <= 1.0


def _heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    headings = [line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines() if line[:1] == "#"]
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_the_benchmark_index_lists_every_file_of_scripts_bench_and_links_to_existing_docs_sections():
    bench = DOCS.parent / "scripts" / "bench"
    text = (bench / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `([\w.]+)` \|", text, flags=re.M)
    assert sorted(listed) == sorted(p.name for p in bench.iterdir() if p.suffix in (".py", ".sh"))
    assert len(listed) == len(set(listed))
    links = re.findall(r"\]\(\.\./\.\./docs/([\w.-]+\.md)#([\w-]+)\)", text)
    benchmarks = [name for name in listed if name.startswith("bench_")]
    assert len(links) >= len(benchmarks)
    for page, anchor in links:
        assert anchor in _heading_anchors(DOCS / page), f"{page}#{anchor}"
    assert not list(bench.glob("*prototype*"))  # prototypes live apart, in scripts/prototypes/
    assert (DOCS.parent / "scripts" / "prototypes" / "public_prototypes.py").is_file()
