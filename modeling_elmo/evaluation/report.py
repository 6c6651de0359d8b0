"""Writing the results of one evaluation run: a JSON file, a Markdown table and matplotlib plots."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..io_utils import atomic_write_bytes

__all__ = ["flatten_results", "write_json", "write_markdown", "markdown_report", "write_plots", "read_training_metrics"]

LAYER_NAMES = {"0": "Layer 0 only", "1": "Layer 1 only", "2": "Layer 2 only", "mix": "Learned mixture"}


def _layer_value(layer: str) -> int | str:
    return int(layer) if layer.isdigit() else layer


def flatten_results(tasks: dict[str, Any], datasets: dict[str, str]) -> list[dict]:
    """The flat ``results`` list: one {"task", "dataset", "metric", "value", "layer"} per number."""
    out: list[dict] = []
    ppl = tasks.get("perplexity")
    if ppl:
        for metric in ("perplexity", "perplexity_forward", "perplexity_backward", "unigram_perplexity"):
            if metric in ppl:
                out.append({"task": "perplexity", "dataset": datasets.get("perplexity", ""), "metric": metric,
                            "value": ppl[metric], "layer": None})
    wsd = tasks.get("wsd-probe")
    if wsd:
        for layer, r in wsd["layers"].items():
            for metric, key in (("nn_sense_accuracy", "accuracy"), ("nn_sense_accuracy_ties_half", "accuracy_ties_half"),
                                ("nn_sense_ties", "ties")):
                out.append({"task": "wsd-probe", "dataset": datasets.get("wsd-probe", ""), "metric": metric,
                            "value": r[key], "layer": _layer_value(layer)})
    for task in ("probe-sentiment", "probe-pos"):
        r = tasks.get(task)
        if r:
            for layer, lr in r["layers"].items():
                out.append({"task": task, "dataset": datasets.get(task, ""), "metric": "accuracy",
                            "value": lr["accuracy"], "layer": _layer_value(layer)})
    return out


def write_json(path: str | Path, payload: dict) -> Path:
    path = Path(path)
    atomic_write_bytes(path, (json.dumps(payload, indent=2, sort_keys=False, allow_nan=False, default=_jsonable) + "\n").encode())
    return path


def write_markdown(path: str | Path, payload: dict) -> Path:
    """Write `markdown_report` of ``payload`` to ``path`` atomically."""
    path = Path(path)
    atomic_write_bytes(path, markdown_report(payload).encode("utf-8"))
    return path


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


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


def markdown_report(payload: dict) -> str:
    """Markdown tables in the style of the seed run's write-up."""
    tasks = payload["tasks"]
    untrained = payload.get("untrained", {}).get("tasks", {})
    lines = [f"# Evaluation of `{payload['model']}`", ""]
    ppl = tasks.get("perplexity")
    if ppl:
        lines += ["## Perplexity", "", f"Dataset: {payload['datasets'].get('perplexity', '')} "
                  f"({ppl['sentences']} sentences, {ppl['targets_per_direction']} targets per direction, "
                  f"{_pct(ppl['unk_rate'])} <UNK> targets)", "",
                  "| Model | Perplexity |", "|---|---|",
                  f"| Word-frequency (unigram) baseline, ignoring context ({ppl.get('unigram_fitted_on', '')}) | "
                  f"{ppl['unigram_perplexity']:.1f} |",
                  f"| Forward language model | {ppl['perplexity_forward']:.1f} |",
                  f"| Backward language model | {ppl['perplexity_backward']:.1f} |",
                  f"| Average (exp of mean NLL of both directions) | {ppl['perplexity']:.1f} |"]
        if untrained.get("perplexity"):
            lines.append(f"| Untrained model (average) | {untrained['perplexity']['perplexity']:.1f} |")
        lines.append("")
    wsd = tasks.get("wsd-probe")
    if wsd:
        uw = untrained.get("wsd-probe")
        lines += ["## Nearest-neighbour sense probe", "",
                  f"Dataset: {payload['datasets'].get('wsd-probe', '')} ({wsd['occurrences']} occurrences of "
                  f"{', '.join(wsd['words'])}). Accuracy over non-tied occurrences (correct/decided); ties are "
                  "reported, never broken by list order.", "",
                  "| Representation | Trained model | Untrained model |", "|---|---|---|"]
        for layer, r in wsd["layers"].items():
            lines.append(f"| Layer {layer} | {_wsd_cell(r)} | {_wsd_cell(uw['layers'].get(layer) if uw else None)} |")
        lines += ["", f"Chance (random neighbour): {_pct(next(iter(wsd['layers'].values()))['chance'])}", ""]
    probe_tasks = [t for t in ("probe-sentiment", "probe-pos") if tasks.get(t)]
    if probe_tasks:
        titles = {"probe-sentiment": "Sentiment accuracy", "probe-pos": "Part-of-speech accuracy"}
        lines += ["## Linear probes on frozen features (dev accuracy)", "",
                  "| Representation | " + " | ".join(titles[t] for t in probe_tasks) + " |",
                  "|---|" + "---|" * len(probe_tasks)]
        keys = list(tasks[probe_tasks[0]]["layers"])
        for key in keys:
            cells = [_pct(tasks[t]["layers"].get(key, {}).get("accuracy")) for t in probe_tasks]
            lines.append(f"| {LAYER_NAMES.get(key, key)} | " + " | ".join(cells) + " |")
        for key in keys:
            if all(untrained.get(t) and key in untrained[t]["layers"] for t in probe_tasks):
                cells = [_pct(untrained[t]["layers"][key]["accuracy"]) for t in probe_tasks]
                lines.append(f"| {LAYER_NAMES.get(key, key)} from an untrained model | " + " | ".join(cells) + " |")
        lines.append("| Majority class | " + " | ".join(_pct(tasks[t]["majority_baseline"]) for t in probe_tasks) + " |")
        lines.append("")
        comparison = payload.get("comparison", {})
        if all(comparison.get(t) for t in probe_tasks):
            lines += ["Trained minus untrained, on the same dev examples (tokens for POS): difference in points, and "
                      "McNemar's exact p-value (examples only the trained / only the untrained model gets right).", "",
                      "| Representation | " + " | ".join(titles[t] for t in probe_tasks) + " |",
                      "|---|" + "---|" * len(probe_tasks)]
            for key in keys:
                cells = []
                for t in probe_tasks:
                    c = comparison[t].get(key)
                    cells.append("" if c is None else f"{100 * c['difference']:+.1f} (p = {c['mcnemar_p_value']:.2g}; "
                                 f"{c['trained_only_correct']} vs {c['untrained_only_correct']})")
                lines.append(f"| {LAYER_NAMES.get(key, key)} | " + " | ".join(cells) + " |")
            lines.append("")
        for t in probe_tasks:
            r = tasks[t]
            mix = r["layers"].get("mix", {}).get("mixture")
            desc = f"{titles[t]}: {r['train_examples']} training / {r['dev_examples']} dev examples ({payload['datasets'].get(t, '')})."
            if mix:
                desc += " Learned layer weights: " + ", ".join(f"layer {j} {w:.2f}" for j, w in enumerate(mix["weights"]))
                if mix.get("gamma") is not None:
                    desc += f", gamma {mix['gamma']:.2f}"
                desc += "."
            lines += [desc, ""]
    return "\n".join(lines).rstrip() + "\n"


def read_training_metrics(model_dir: str | Path) -> tuple[dict[str, list[tuple[float, float]]], Path | None]:
    """Perplexity curves from the pretraining ``metrics.jsonl`` in ``model_dir`` (or another ``*.jsonl``
    there whose records carry a step and a perplexity). Records with a ``split`` (validation, test)
    give the series ``"<split> perplexity"``; training records give ``train_ppl`` (or any other
    ``*perplexity*``/``*ppl*`` key). A step logged twice keeps its last value. Returns ({name: [(step,
    value), ...]}, path) or ({}, None) when there is none."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return {}, None
    candidates = [model_dir / "metrics.jsonl"] + sorted(p for p in model_dir.glob("*.jsonl") if p.name != "metrics.jsonl")
    for path in candidates:
        if not path.is_file():
            continue
        series: dict[str, dict[float, float]] = {}
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        continue
                    r = json.loads(line)
                    step = _step(r) if isinstance(r, dict) else None
                    if step is None:
                        continue
                    for key, value in _curves(r).items():
                        if "split" in r:
                            if key != "perplexity":
                                continue
                            key = f"{r['split']} perplexity"
                        series.setdefault(key, {})[step] = value
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if series:
            return {k: sorted(v.items()) for k, v in series.items()}, path
    return {}, None


def _step(r: dict) -> float | None:
    for k in ("step", "global_step", "update"):
        if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool):
            return float(r[k])
    return None


def _curves(r: dict) -> dict[str, float]:
    out = {}
    for k, v in r.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and ("perplexity" in k or "ppl" in k):
            out[k] = float(v)
    return out


def write_plots(payload: dict, out_dir: str | Path, model_dir: str | Path | None = None) -> dict[str, str]:
    """Write the plots that apply; returns {name: file name in ``out_dir``, or a message saying why skipped}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    tasks = payload["tasks"]
    untrained = payload.get("untrained", {}).get("tasks", {})

    panels = []
    for t in ("probe-sentiment", "probe-pos"):
        if tasks.get(t):
            keys = list(tasks[t]["layers"])
            panels.append((t, keys, [tasks[t]["layers"][k]["accuracy"] for k in keys],
                           [untrained[t]["layers"][k]["accuracy"] if untrained.get(t) and k in untrained[t]["layers"] else None
                            for k in keys]))
    if tasks.get("wsd-probe"):
        keys = list(tasks["wsd-probe"]["layers"])
        uw = untrained.get("wsd-probe")
        panels.append(("wsd-probe (ties as half)", keys,
                       [tasks["wsd-probe"]["layers"][k]["accuracy_ties_half"] for k in keys],
                       [uw["layers"][k]["accuracy_ties_half"] if uw else None for k in keys]))
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
        for ax, (title, keys, trained_vals, untrained_vals) in zip(axes[0], panels):
            xs = range(len(keys))
            ax.plot(xs, [v if v is not None else float("nan") for v in trained_vals], "o-", label="trained")
            if any(v is not None for v in untrained_vals):
                ax.plot(xs, [v if v is not None else float("nan") for v in untrained_vals], "s--", label="untrained")
            ax.set_xticks(list(xs), [("mix" if k == "mix" else f"layer {k}") for k in keys])
            ax.set_title(title)
            ax.set_ylabel("dev accuracy")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        written["probe_accuracy"] = _save(fig, out_dir / "probe_accuracy.png", plt)

    mixes = [(t, tasks[t]["layers"]["mix"]["mixture"]["weights"]) for t in ("probe-sentiment", "probe-pos")
             if tasks.get(t) and "mix" in tasks[t]["layers"] and tasks[t]["layers"]["mix"].get("mixture")]
    if mixes:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        width = 0.8 / len(mixes)
        for k, (t, w) in enumerate(mixes):
            ax.bar([j + k * width for j in range(len(w))], w, width=width, label=t)
        ax.set_xticks([j + width * (len(mixes) - 1) / 2 for j in range(len(mixes[0][1]))],
                      [f"layer {j}" for j in range(len(mixes[0][1]))])
        ax.set_ylabel("softmax weight")
        ax.set_title("learned scalar-mix weights")
        ax.legend()
        fig.tight_layout()
        written["layer_weights"] = _save(fig, out_dir / "layer_weights.png", plt)

    series, source = read_training_metrics(model_dir) if model_dir is not None else ({}, None)
    if series:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for k, pts in sorted(series.items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if len(pts) < 30 else "-", label=k)
        ax.set_xlabel("step")
        ax.set_ylabel("perplexity")
        ax.set_yscale("log")
        ax.set_title(f"training curve ({source.name})")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written["training_perplexity"] = _save(fig, out_dir / "training_perplexity.png", plt)
    else:
        written["training_perplexity"] = "skipped: no pretraining metrics JSONL (records with a step and a perplexity) in the model folder"
    return written


def _save(fig, path: Path, plt) -> str:
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path.name  # relative to the output folder (no machine paths in the results)
