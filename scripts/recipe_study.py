#!/usr/bin/env python
"""Compare pretraining recipes for a small corpus at equal minutes: one `elmo pretrain` run per variant, each scored
with `elmo evaluate` on held-out Brown perplexity and the sentiment and POS probes (dev splits).

    OMP_NUM_THREADS=1 python scripts/recipe_study.py --data-dir ../shared/data --minutes 10 --output-dir runs/study
    python scripts/recipe_study.py --data-dir ../shared/data --output-dir runs/study --table-only   # the table again

Every variant is the `cpu-lm-corpus` recipe (the `elmo-cpu` preset on `lm-corpus`, Brown held out) with the
settings under study pinned to the baseline's (`BASELINE`) and a few flags changed (`VARIANTS`), so the study
reproduces whatever the recipe's defaults are now. Each run is trained for the same number of minutes on one
thread; `--parallel 2` runs two at a time (one per core). Runs that already have their results are not repeated,
so the script can be stopped and started again. The untrained comparison (`--compare-untrained`) is computed once,
with the first variant: the probes read the biLM only, and every variant's biLM has the same shape and the same
seed. Prints a Markdown table and writes it to `OUTPUT_DIR/study.md` and `study.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    from modeling_elmo.folders.run_folder import RunFolder
    from modeling_elmo.utils.results import read_results
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/recipe_study.py: the modeling_elmo package is not installed: run `pip install .` in the clone "
        "(or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )

#: The settings under study as the lm-corpus recipes had them before the study; every run starts from these.
BASELINE = [
    "--dropout",
    "0.1",
    "--vocab-size",
    "20000",
    "--batching",
    "sentences",
    "--optimizer",
    "adamw",
    "--learning-rate",
    "0.002",
    "--lr-scheduler-type",
    "constant_with_warmup",
    "--warmup-steps",
    "100",
    "--per-device-train-batch-size",
    "64",
    "--eval-steps",
    "0",
]

#: name -> the flags that differ from `BASELINE` (what each variant tests); later flags win.
VARIANTS: dict[str, list[str]] = {
    "baseline": [],  # dropout 0.1, 20k words, sentences, AdamW constant
    "dropout-0.3": ["--dropout", "0.3"],
    "vocab-60k": ["--vocab-size", "60000"],
    "windows": ["--batching", "windows"],
    "cosine-budget": ["--lr-scheduler-type", "cosine"],  # annealed over the minutes of the budget
    "early-stopping": ["--eval-steps", "150", "--early-stopping-patience", "3", "--load-best-model-at-end"],
    # second round: the learning rate with each schedule, on the better batching; seeds for the noise
    "windows-lr-0.004": ["--batching", "windows", "--learning-rate", "0.004"],
    "windows-cosine-lr-0.004": ["--batching", "windows", "--lr-scheduler-type", "cosine", "--learning-rate", "0.004"],
    "windows-cosine": ["--batching", "windows", "--lr-scheduler-type", "cosine"],
    "baseline-seed-2": ["--seed", "2"],
    "windows-seed-2": ["--batching", "windows", "--seed", "2"],
    "windows-lr-0.004-seed-2": ["--batching", "windows", "--learning-rate", "0.004", "--seed", "2"],
    "windows-lr-0.004-seed-3": ["--batching", "windows", "--learning-rate", "0.004", "--seed", "3"],
    "windows-cosine-lr-0.004-seed-2": [
        "--batching",
        "windows",
        "--lr-scheduler-type",
        "cosine",
        "--learning-rate",
        "0.004",
        "--seed",
        "2",
    ],
}
#: The variant the lm-corpus recipes use (docs/pretraining.md has the table that chose it).
WINNER = "windows-lr-0.004"
PROBE_TASKS = ("probe-sentiment", "probe-pos")


def pretrain_command(name: str, flags: list[str], args: argparse.Namespace) -> list[str]:
    data = args.data_dir / "lm-corpus"
    train = [str(p) for p in sorted((data / "gutenberg").glob("*.txt"))] + [
        str(data / f) for f in ("kjv_bible.txt", "state_union.txt", "inaugural.txt", "reuters_training.txt", "masc.txt")
    ]
    return [
        sys.executable,
        "-m",
        "modeling_elmo.cli",
        "pretrain",
        "--config",
        "cpu-lm-corpus",
        "--train-file",
        *train,
        "--test-file",
        str(data / "reuters_test.txt"),
        "--max-train-minutes",
        str(args.minutes),
        "--output-dir",
        str(args.output_dir / name),
        "--checkpointing-steps",
        "0",
        "--seed",
        str(args.seed),
        *BASELINE,
        *flags,
    ]


def evaluate_command(name: str, args: argparse.Namespace, compare_untrained: bool) -> list[str]:
    data = args.data_dir / "lm-corpus"
    return [
        sys.executable,
        "-m",
        "modeling_elmo.cli",
        "evaluate",
        str(args.output_dir / name),
        "--task",
        "perplexity",
        *PROBE_TASKS,
        "--text",
        str(data / "brown.txt"),
        "--max-sentences",
        str(args.brown_sentences),
        "--unigram-fit",
        str(data / "masc.txt"),
        "--max-train-examples",
        str(args.probe_train_examples),
        "--data-dir",
        str(args.data_dir),
        "--no-progress",
        *(["--compare-untrained"] if compare_untrained else []),
    ]


def run_variant(name: str, args: argparse.Namespace, compare_untrained: bool) -> None:
    run = RunFolder(args.output_dir / name)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = args.output_dir / f"{name}.log"
    with open(log, "a", encoding="utf-8") as out:
        if not run.has_model():  # an interrupted run starts afresh: every run gets the same minutes in one stage
            restart = ["--overwrite"] if run.is_run() else []
            subprocess.run(
                pretrain_command(name, VARIANTS[name], args) + restart, check=True, env=env, stdout=out, stderr=out
            )
        if not run.evaluation.results_file.is_file():
            subprocess.run(evaluate_command(name, args, compare_untrained), check=True, env=env, stdout=out, stderr=out)


def summarise(name: str, args: argparse.Namespace) -> dict:
    run = RunFolder(args.output_dir / name)
    metadata = run.read_training_metadata() or {}
    trained = read_results(run.eval_results_file)
    evaluated = read_results(run.evaluation.results_file)
    row = {
        "variant": name,
        "flags": " ".join(VARIANTS[name]) or "(the recipe)",
        "updates": metadata.get("global_step"),
        "tokens_seen": metadata.get("tokens_seen"),
        "model_step": metadata.get("model_step"),
    }
    for record in trained.perplexity:
        if record.split == "validation":
            row["validation_ppl"] = record.average
    brown = evaluated.perplexity[0]
    row.update(
        brown_ppl=brown.average,
        brown_unigram_ppl=brown.unigram.average if brown.unigram else None,
        brown_unk_rate=brown.unk_rate,
    )
    for score in evaluated.scores:
        if score.task in PROBE_TASKS and score.metric == "accuracy" and score.representation == "mix":
            row[f"{score.task}_mix"] = score.value
            if score.untrained is not None:
                row[f"{score.task}_mix_untrained"] = score.untrained.value
    return row


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    def cell(value, fmt="{:.1f}"):
        return "—" if value is None else fmt.format(value)

    lines = [
        f"`elmo-cpu` on `lm-corpus`, {args.minutes} minutes of training per run, one thread each "
        f"(`--parallel {args.parallel}`); Brown: the first {args.brown_sentences} sentences, unigram fitted on "
        f"masc.txt; probes: {args.probe_train_examples} training examples, dev splits, learned scalar mix.",
        "",
        "| variant | flags | updates | tokens | validation ppl | Brown ppl (unigram) | Brown `<UNK>` rate "
        "| sentiment dev | POS dev |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | `{r['flags']}` | {cell(r.get('updates'), '{:,}')} | "
            f"{cell(r.get('tokens_seen'), '{:,}')} "
            f"| {cell(r.get('validation_ppl'))} | {cell(r.get('brown_ppl'))} "
            f"({cell(r.get('brown_unigram_ppl'), '{:.0f}')}) "
            f"| {cell(r.get('brown_unk_rate'), '{:.3f}')} | {cell(r.get('probe-sentiment_mix'), '{:.1%}')} "
            f"| {cell(r.get('probe-pos_mix'), '{:.1%}')} |"
        )
    untrained = next((r for r in rows if "probe-pos_mix_untrained" in r), None)
    if untrained:
        lines += [
            "",
            f"Untrained model of the same shape: sentiment {untrained.get('probe-sentiment_mix_untrained', 0):.1%}, "
            f"POS {untrained['probe-pos_mix_untrained']:.1%}.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="the shared data folder (lm-corpus, probes)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/study"))
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--minutes", type=float, default=10.0, help="training minutes per run (default 10)")
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--brown-sentences", type=int, default=1000)
    parser.add_argument("--probe-train-examples", type=int, default=3000)
    parser.add_argument("--table-only", action="store_true", help="only summarise runs that are done")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        started = time.time()
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            for future in [pool.submit(run_variant, n, args, i == 0) for i, n in enumerate(names)]:
                future.result()
        print(f"all runs done in {(time.time() - started) / 60:.1f} minutes", file=sys.stderr)
    rows = [summarise(n, args) for n in names if RunFolder(args.output_dir / n).evaluation.results_file.is_file()]
    table = markdown(rows, args)
    (args.output_dir / "study.md").write_text(table, encoding="utf-8")
    (args.output_dir / "study.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
