"""From task outputs to the results schema (`modeling_elmo.utils.results`), a Markdown report and matplotlib plots.

`score_records` turns the probes' per-layer dicts into `ScoreResult` records; `markdown_report` renders an
`EvaluationResults` (its records, plus the task diagnostics kept under ``details["tasks"]``) as tables;
`write_plots` draws the plots an `EvaluationFolder` names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..folders.files import atomic_output
from ..folders.run_folder import EvaluationFolder, RunFolder
from ..utils.results import EvaluationResults, ScoreResult, UntrainedComparison

__all__ = ["markdown_report", "read_training_curves", "representation_name", "score_records", "write_plots"]

PROBE_TASKS = ("probe-sentiment", "probe-pos")
#: The simple baseline of each task (`ScoreResult.baseline_name`): what a reader compares the features with.
MOST_FREQUENT_TAG = "most frequent tag of the word"
MAJORITY_CLASS = "majority class"
RANDOM_NEIGHBOUR = "chance (random neighbour)"
TITLES = {"probe-sentiment": "Sentiment accuracy", "probe-pos": "Part-of-speech accuracy"}


def representation_name(layer: str) -> str:
    """``"2"`` -> ``"layer 2"``; ``"mix"`` stays ``"mix"``."""
    return f"layer {layer}" if str(layer).isdigit() else str(layer)


def _label(representation: str) -> str:
    return "Learned mixture" if representation == "mix" else representation.capitalize() + " only"


# ----------------------------------------------------------------------------------------------- records
def score_records(
    tasks: dict[str, Any],
    datasets: dict[str, str],
    untrained: dict[str, Any] | None = None,
    comparison: dict[str, Any] | None = None,
) -> list[ScoreResult]:
    """The `ScoreResult` records of the probe tasks in ``tasks`` (the dicts `wsd_probe` and `probe_task` return),
    with the untrained model's numbers and the paired comparison when given."""
    untrained = untrained or {}
    comparison = comparison or {}
    records: list[ScoreResult] = []
    wsd = tasks.get("wsd-probe")
    if wsd:
        for layer, r in wsd["layers"].items():
            u = untrained.get("wsd-probe", {}).get("layers", {}).get(layer)
            for metric, examples in (("accuracy", r["correct"] + r["wrong"]), ("accuracy_ties_half", r["scored"])):
                records.append(
                    ScoreResult(
                        task="wsd-probe",
                        dataset=datasets["wsd-probe"],
                        split="all",
                        representation=representation_name(layer),
                        metric=metric,
                        value=r[metric],
                        examples=examples,
                        baseline=r["chance"],
                        baseline_name=RANDOM_NEIGHBOUR,
                        untrained=UntrainedComparison(value=u[metric]) if u else None,
                    )
                )
    for task in PROBE_TASKS:
        r = tasks.get(task)
        if not r:
            continue
        examples = r["dev_tokens"] if task == "probe-pos" else r["dev_examples"]
        # part of speech: the most frequent tag of each word (files written before it: the majority tag)
        baseline, baseline_name = r["majority_baseline"], MAJORITY_CLASS
        if "most_frequent_tag_baseline" in r:
            baseline, baseline_name = r["most_frequent_tag_baseline"], MOST_FREQUENT_TAG
        for layer, lr in r["layers"].items():
            u = untrained.get(task, {}).get("layers", {}).get(layer)
            c = comparison.get(task, {}).get(layer)
            untrained_score = None
            if u is not None:
                untrained_score = UntrainedComparison(
                    value=u["accuracy"],
                    trained_only_correct=c["trained_only_correct"] if c else None,
                    untrained_only_correct=c["untrained_only_correct"] if c else None,
                    mcnemar_p_value=c["mcnemar_p_value"] if c else None,
                )
            records.append(
                ScoreResult(
                    task=task,
                    dataset=datasets[task],
                    split="validation",
                    representation=representation_name(layer),
                    metric="accuracy",
                    value=lr["accuracy"],
                    examples=examples,
                    baseline=baseline,
                    baseline_name=baseline_name,
                    untrained=untrained_score,
                )
            )
    return records


# ----------------------------------------------------------------------------------------------- Markdown
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _wsd_cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if r["accuracy"] is None:
        return f"all tied ({r['ties']}/{r['scored']})"
    text = f"{_pct(r['accuracy'])} ({r['correct']}/{r['correct'] + r['wrong']})"
    if r["ties"]:
        text += f", {r['ties']} tie{'s' if r['ties'] != 1 else ''}; ties as half {_pct(r['accuracy_ties_half'])}"
    return text


def markdown_report(results: EvaluationResults) -> str:
    """Markdown tables of ``results``: perplexities, the sense probe, the linear probes and the paired comparison."""
    tasks = results.details.get("tasks", {})
    untrained = results.details.get("untrained_tasks", {})
    lines = [f"# Evaluation of `{results.model}`", ""]
    for p in results.perplexity:
        lines += [
            "## Perplexity",
            "",
            f"Dataset: {p.dataset} ({p.examples} sentences, {p.targets_per_direction} "
            f"targets per direction, {_pct(p.unk_rate)} <UNK> targets)",
            "",
            "| Model | Perplexity |",
            "|---|---|",
        ]
        if p.unigram is not None:
            lines.append(
                f"| Word-frequency (unigram) baseline, ignoring context (fitted on {p.unigram.fitted_on}) | "
                f"{p.unigram.average:.1f} |"
            )
        lines += [
            f"| Forward language model | {p.forward:.1f} |",
            f"| Backward language model | {p.backward:.1f} |",
            f"| Average (exp of mean NLL of both directions) | {p.average:.1f} |",
        ]
        if p.untrained_average is not None:
            lines.append(f"| Untrained model (average) | {p.untrained_average:.1f} |")
        lines.append("")
    wsd = tasks.get("wsd-probe")
    if wsd:
        uw = untrained.get("wsd-probe")
        dataset = next(s.dataset for s in results.scores if s.task == "wsd-probe")
        lines += [
            "## Nearest-neighbour sense probe",
            "",
            f"Dataset: {dataset} ({wsd['occurrences']} occurrences of {', '.join(wsd['words'])}). Accuracy over "
            "non-tied occurrences (correct/decided); ties are reported, never broken by list order.",
            "",
            "| Representation | Trained model | Untrained model |",
            "|---|---|---|",
        ]
        for layer, r in wsd["layers"].items():
            lines.append(f"| Layer {layer} | {_wsd_cell(r)} | {_wsd_cell(uw['layers'].get(layer) if uw else None)} |")
        lines += ["", f"Chance (random neighbour): {_pct(next(iter(wsd['layers'].values()))['chance'])}", ""]
    probes = {task: {s.representation: s for s in results.scores if s.task == task} for task in PROBE_TASKS}
    probe_tasks = [t for t in PROBE_TASKS if probes[t]]
    if probe_tasks:
        header = [
            "| Representation | " + " | ".join(TITLES[t] for t in probe_tasks) + " |",
            "|---|" + "---|" * len(probe_tasks),
        ]
        keys = list(probes[probe_tasks[0]])
        lines += ["## Linear probes on frozen features (dev accuracy)", "", *header]
        for key in keys:
            cells = [_pct(probes[t][key].value) if key in probes[t] else "-" for t in probe_tasks]
            lines.append(f"| {_label(key)} | " + " | ".join(cells) + " |")
        for key in keys:
            if all(key in probes[t] and probes[t][key].untrained for t in probe_tasks):
                cells = [_pct(probes[t][key].untrained.value) for t in probe_tasks]
                lines.append(f"| {_label(key)} from an untrained model | " + " | ".join(cells) + " |")
        first = {t: next(iter(probes[t].values())) for t in probe_tasks}
        lines += [
            "| Simple baseline (no model) | "
            + " | ".join(f"{_pct(first[t].baseline)} ({first[t].baseline_name or MAJORITY_CLASS})" for t in probe_tasks)
            + " |",
            "",
        ]
        for t in probe_tasks:
            lost = [
                _label(key)
                for key, s in probes[t].items()
                if s.value is not None and s.baseline is not None and s.value <= s.baseline
            ]
            if lost:
                lines += [
                    f"{TITLES[t]}: {', '.join(lost)} do{'es' if len(lost) == 1 else ''} not beat the simple "
                    f"baseline ({first[t].baseline_name or MAJORITY_CLASS}).",
                    "",
                ]
        if all(
            s.untrained and s.untrained.mcnemar_p_value is not None for t in probe_tasks for s in probes[t].values()
        ):
            lines += [
                "Trained minus untrained, on the same dev examples (tokens for POS): difference in points, and "
                "McNemar's exact p-value (examples only the trained / only the untrained model gets right).",
                "",
                *header,
            ]
            for key in keys:
                cells = []
                for t in probe_tasks:
                    s = probes[t].get(key)
                    c = s.untrained if s else None
                    cells.append(
                        ""
                        if c is None
                        else f"{100 * (s.value - c.value):+.1f} (p = {c.mcnemar_p_value:.2g}; "
                        f"{c.trained_only_correct} vs {c.untrained_only_correct})"
                    )
                lines.append(f"| {_label(key)} | " + " | ".join(cells) + " |")
            lines.append("")
        for t in probe_tasks:
            r = tasks.get(t, {})
            mix = r.get("layers", {}).get("mix", {}).get("mixture")
            examples = f"{r.get('train_examples')} training / {r.get('dev_examples')} dev examples"
            desc = f"{TITLES[t]}: {examples} ({first[t].dataset})."
            if mix:
                desc += " Learned layer weights: " + ", ".join(
                    f"layer {j} {w:.2f}" for j, w in enumerate(mix["weights"])
                )
                desc += f", gamma {mix['gamma']:.2f}."
            lines += [desc, ""]
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------- plots
def read_training_curves(run: RunFolder) -> dict[str, list[tuple[int, float]]]:
    """Perplexity curves of a training run's ``metrics.jsonl``: ``"train perplexity"`` (the records' ``train_ppl``)
    and ``"<split> perplexity"`` (evaluation records: ``split`` and ``perplexity``). A step logged twice (after a
    resume) keeps its last value."""
    series: dict[str, dict[int, float]] = {}
    for record in run.read_metrics():
        if "split" in record and "perplexity" in record:
            series.setdefault(f"{record['split']} perplexity", {})[record["step"]] = float(record["perplexity"])
        elif "train_ppl" in record:
            series.setdefault("train perplexity", {})[record["step"]] = float(record["train_ppl"])
    return {name: sorted(points.items()) for name, points in series.items()}


def probe_y_range(panels: list[tuple[str, list[ScoreResult]]], margin: float = 0.05) -> tuple[float, float]:
    """One accuracy range for every panel of the probe plot: all trained, untrained and baseline values with a
    margin, within [0, 1], and at least 0.1 wide (so that noise between close values does not look large)."""
    values = [
        v
        for _, scores in panels
        for s in scores
        for v in (s.value, s.baseline, s.untrained.value if s.untrained else None)
        if v is not None
    ]
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    if high - low < 0.1:
        middle = (low + high) / 2
        low, high = middle - 0.05, middle + 0.05
    low, high = max(0.0, low - margin), min(1.0, high + margin)
    return low, high


def probe_figure(panels: list[tuple[str, list[ScoreResult]]], plt: Any) -> Any:
    """The probe accuracies, one panel per task over the representations, on a common y-range (`probe_y_range`),
    with the task's simple baseline (`ScoreResult.baseline_name`) as a line."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    low, high = probe_y_range(panels)
    for ax, (title, scores) in zip(axes[0], panels, strict=False):
        xs = range(len(scores))
        ax.plot(xs, [s.value if s.value is not None else float("nan") for s in scores], "o-", label="trained")
        if any(s.untrained for s in scores):
            ax.plot(
                xs,
                [s.untrained.value if s.untrained and s.untrained.value is not None else float("nan") for s in scores],
                "s--",
                label="untrained",
            )
        baselines = {s.baseline for s in scores if s.baseline is not None}
        if baselines:
            name = scores[0].baseline_name or (RANDOM_NEIGHBOUR if scores[0].task == "wsd-probe" else MAJORITY_CLASS)
            ax.axhline(max(baselines), color="gray", linestyle=":", label=name)
        ax.set_xticks(list(xs), [s.representation for s in scores])
        ax.set_ylim(low, high)
        ax.set_title(title)
        ax.set_ylabel("dev accuracy")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def write_plots(
    results: EvaluationResults, folder: EvaluationFolder, run: RunFolder | None = None, *, before_replace=None
) -> dict[str, str]:
    """Write the plots that apply into ``folder``; returns {plot name: file name, or why it was skipped}.
    ``before_replace(path, temporary)`` runs for each plot once it is complete, before it takes its name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.root.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    tasks = results.details.get("tasks", {})
    panels = []
    for t in PROBE_TASKS:
        scores = [s for s in results.scores if s.task == t]
        if scores:
            panels.append((t, scores))
    wsd = [s for s in results.scores if s.task == "wsd-probe" and s.metric == "accuracy_ties_half"]
    if wsd:
        panels.append(("wsd-probe (ties as half)", wsd))
    if panels:
        written["probe_accuracy"] = _save(
            probe_figure(panels, plt), folder.plot_file("probe_accuracy"), plt, before_replace
        )

    mixes = [
        (t, tasks[t]["layers"]["mix"]["mixture"]["weights"])
        for t in PROBE_TASKS
        if tasks.get(t, {}).get("layers", {}).get("mix", {}).get("mixture")
    ]
    if mixes:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        width = 0.8 / len(mixes)
        for k, (t, w) in enumerate(mixes):
            ax.bar([j + k * width for j in range(len(w))], w, width=width, label=t)
        ax.set_xticks(
            [j + width * (len(mixes) - 1) / 2 for j in range(len(mixes[0][1]))],
            [f"layer {j}" for j in range(len(mixes[0][1]))],
        )
        ax.set_ylabel("softmax weight")
        ax.set_title("learned scalar-mix weights")
        ax.legend()
        fig.tight_layout()
        written["layer_weights"] = _save(fig, folder.plot_file("layer_weights"), plt, before_replace)

    series = read_training_curves(run) if run is not None else {}
    if series:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for name, points in sorted(series.items()):
            ax.plot([p[0] for p in points], [p[1] for p in points], "o-" if len(points) < 30 else "-", label=name)
        ax.set_xlabel("update")
        ax.set_ylabel("perplexity")
        ax.set_yscale("log")
        ax.set_title(f"training curve ({RunFolder.METRICS})")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written["training_perplexity"] = _save(fig, folder.plot_file("training_perplexity"), plt, before_replace)
    else:
        written["training_perplexity"] = f"skipped: the model folder has no {RunFolder.METRICS} with perplexities"
    return written


def _save(fig, path: Path, plt, before_replace=None) -> str:
    try:
        with atomic_output(path, suffix=path.suffix) as tmp:
            fig.savefig(tmp, dpi=110)
            if before_replace is not None:
                before_replace(path, tmp)
    finally:
        plt.close(fig)
    return path.name  # relative to the evaluation folder (no machine paths in the results)
