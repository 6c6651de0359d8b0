#!/usr/bin/env python
"""Compare pretraining recipes for a small corpus at equal minutes: one `elmo pretrain` run per variant, each scored
with `elmo evaluate` on held-out Brown perplexity and the sentiment and POS probes (dev splits; POS beside the
most-frequent-tag baseline).

    OMP_NUM_THREADS=1 python scripts/recipe_study.py --data-dir ../shared/data --minutes 10 --output-dir runs/study
    python scripts/recipe_study.py --data-dir ../shared/data --output-dir runs/study --table-only   # the table again

Every variant is the `cpu-lm-corpus` recipe (the `elmo-cpu` preset on `lm-corpus`, Brown held out) with the
settings under study pinned to the baseline's (`BASELINE`) and a few flags changed (`VARIANTS`), so the study
reproduces whatever the recipe's defaults are now. Each run is trained for the same number of minutes on one
thread; `--parallel 2` runs two at a time (one per core). With several marks (`--minutes 10,30,60`) one run per
variant trains for the last and saves snapshots at the others (`elmo pretrain --save-at-minutes`): the schedule is
constant after a warm-up in updates, so a snapshot at 10 minutes is the model of a 10-minute run; the cosine and
early-stopping variants, where it is not, train one run per mark. `--before-python` trains each variant a second
time with the package of another environment (an earlier revision), side by side, every point scored by this
environment's `elmo evaluate`; where that package has no --save-at-minutes, it trains one run per mark. Runs and
evaluations that are done are not repeated, so the script can be stopped and started again. The untrained
comparison (`--compare-untrained`) is computed once, with the first point: the probes read the biLM only, and every
variant's biLM has the same shape and the same seed. Prints a Markdown table and writes it to `OUTPUT_DIR/study.md`
and `study.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

try:
    from modeling_elmo.evaluation.report import MOST_FREQUENT_TAG
    from modeling_elmo.folders.run_folder import RunFolder, read_json_object
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
    "--mixed-precision",
    "no",  # fp32, as the recipes trained then (the recipe's `auto` would train in bf16 on a CPU with native bf16)
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
    # the winner in bf16 autocast: only on a CPU with native bf16 (elsewhere `elmo pretrain` refuses it)
    "windows-lr-0.004-bf16": ["--batching", "windows", "--learning-rate", "0.004", "--mixed-precision", "bf16"],
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


@dataclass
class Job:
    """One `elmo pretrain` run of a variant in one environment, and the points it yields: (minutes, model folder)."""

    variant: str
    package: str  # "after" (this environment) or the --before-label of the other one
    python: str
    run: Path
    minutes: float  # the run's --max-train-minutes
    save_at: list[float] = field(default_factory=list)  # its --save-at-minutes

    @property
    def points(self) -> list[tuple[float, Path]]:
        run = RunFolder(self.run)
        return [(m, run.snapshot_dir(m)) for m in self.save_at] + [(self.minutes, self.run)]


def parse_minutes(text: str) -> list[float]:
    """``10,30,60`` -> [10.0, 30.0, 60.0] (ascending, each > 0)."""
    try:
        marks = sorted({float(item) for item in text.split(",") if item.strip()})
    except ValueError:
        marks = []
    if not marks or not all(m > 0 and m == m and m != float("inf") for m in marks):
        raise argparse.ArgumentTypeError(f"expected minutes > 0 separated by commas, e.g. 10,30,60; got {text!r}")
    return marks


def cli(python: str, command: str) -> list[str]:
    return [python, "-m", "modeling_elmo.cli", command]


def pretrain_command(job: Job, args: argparse.Namespace) -> list[str]:
    data = args.data_dir / "lm-corpus"
    train = [str(p) for p in sorted((data / "gutenberg").glob("*.txt"))] + [
        str(data / f) for f in ("kjv_bible.txt", "state_union.txt", "inaugural.txt", "reuters_training.txt", "masc.txt")
    ]
    return [
        *cli(job.python, "pretrain"),
        "--config",
        "cpu-lm-corpus",
        "--train-file",
        *train,
        "--test-file",
        str(data / "reuters_test.txt"),
        "--max-train-minutes",
        f"{job.minutes:g}",
        *(["--save-at-minutes", ",".join(f"{m:g}" for m in job.save_at)] if job.save_at else []),
        "--output-dir",
        str(job.run),
        "--checkpointing-steps",
        "0",
        "--seed",
        str(args.seed),
        *BASELINE,
        *VARIANTS[job.variant],
        *shlex.split(args.extra_flags),
    ]


def evaluate_command(model: Path, args: argparse.Namespace, compare_untrained: bool) -> list[str]:
    """`elmo evaluate` of one point, by this environment's package (every point scored by the same code)."""
    data = args.data_dir / "lm-corpus"
    dev = ["--max-dev-examples", str(args.probe_dev_examples)] if args.probe_dev_examples else []
    return [
        *cli(sys.executable, "evaluate"),
        str(model),
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
        *dev,
        "--data-dir",
        str(args.data_dir),
        "--no-progress",
        *(["--compare-untrained"] if compare_untrained else []),
    ]


def supports_snapshots(python: str, cwd: Path) -> bool:
    """Whether the package in ``python``'s environment has ``elmo pretrain --save-at-minutes``."""
    help_text = subprocess.run(
        [*cli(python, "pretrain"), "--help"], check=True, capture_output=True, text=True, cwd=cwd
    ).stdout
    return "--save-at-minutes" in help_text


def snapshots_apply(variant: str) -> bool:
    """Whether a variant's snapshot at M minutes is the model of an M-minute run: a schedule that does not depend on
    the run's length (its flags after `BASELINE`'s; the last one wins), and no best-model selection or early stop."""
    flags = BASELINE + VARIANTS[variant]
    schedule = [flags[i + 1] for i, flag in enumerate(flags) if flag == "--lr-scheduler-type"][-1]
    selects = {"--load-best-model-at-end", "--early-stopping-patience"} & set(flags)
    return schedule in ("constant", "constant_with_warmup") and not selects


def plan_jobs(names: list[str], args: argparse.Namespace) -> list[Job]:
    """Per variant, one run per environment (this one, then --before-python's) that gives every mark with
    snapshots, or one run per mark where that environment's package has no --save-at-minutes or snapshots do not
    apply to the variant (`snapshots_apply`). A variant's runs come one after the other, so `--parallel 2` trains
    its before and after side by side."""
    environments = {"after": sys.executable}
    if args.before_python:
        environments[args.before_label] = str(args.before_python)
    out, last, earlier = args.output_dir, args.minutes[-1], args.minutes[:-1]
    if args.table_only:  # no process started: the runs' layout tells
        snapshots = dict.fromkeys(environments, None)
    else:
        snapshots = {label: supports_snapshots(python, out) for label, python in environments.items()}
    jobs = []
    for name in names:
        for label, python in environments.items():
            run = out / (name if label == "after" else f"{name}@{label}")
            supported = run.is_dir() if snapshots[label] is None else snapshots[label]
            if not earlier or (supported and snapshots_apply(name)):
                jobs.append(Job(name, label, python, run, last, earlier))
            else:
                jobs += [Job(name, label, python, run.with_name(f"{run.name}-{m:g}min"), m) for m in args.minutes]
    return jobs


def check_existing_run(job: Job) -> None:
    """Refuse a finished run in the job's folder that trained for other minutes or saved other snapshots."""
    metadata = RunFolder(job.run).read_training_metadata() or {}
    trained = metadata.get("args", {})
    minutes, save_at = trained.get("max_train_minutes"), trained.get("save_at_minutes")
    wanted = ",".join(f"{m:g}" for m in job.save_at) or None
    if minutes != job.minutes or (save_at or None) != wanted:
        sys.exit(
            f"scripts/recipe_study.py: {job.run} holds a run of {minutes} minutes (snapshots at {save_at}), not of "
            f"{job.minutes:g} (snapshots at {wanted}); choose another --output-dir."
        )


def run_job(job: Job, args: argparse.Namespace, compare_untrained: bool) -> None:
    run = RunFolder(job.run)
    # the subprocesses run in the output folder: `python -m` puts the working folder first on the import path, and
    # a clone's own package must not stand in for the package of the environment under test
    options = dict(check=True, env=environment(), cwd=args.output_dir)
    with open(job.run.with_name(job.run.name + ".log"), "a", encoding="utf-8") as out:
        if run.has_model():
            check_existing_run(job)
        else:  # an interrupted run starts afresh: every run gets the same minutes in one stage
            restart = ["--overwrite"] if run.is_run() else []
            subprocess.run(pretrain_command(job, args) + restart, stdout=out, stderr=out, **options)
        for position, (_, model) in enumerate(job.points):
            if RunFolder(model).has_model() and not RunFolder(model).evaluation.results_file.is_file():
                command = evaluate_command(model, args, compare_untrained and position == 0)
                subprocess.run(command, stdout=out, stderr=out, **options)


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def summarise(job: Job, minutes: float, model: Path) -> dict:
    """The row of one point: its updates and tokens (the snapshot's record, or the finished run's metadata), the
    run's validation perplexity (at the end only), and what `elmo evaluate` measured."""
    folder = RunFolder(model)
    if model == job.run:
        metadata = folder.read_training_metadata() or {}
        trained = read_results(folder.eval_results_file)
        validation = next((r.average for r in trained.perplexity if r.split == "validation"), None)
    else:
        metadata = read_json_object(model / RunFolder.SNAPSHOT_INFO, "snapshot record") or {}
        validation = None
    evaluated = read_results(folder.evaluation.results_file)
    row = {
        "variant": job.variant,
        "package": job.package,
        "minutes": minutes,
        "flags": " ".join(VARIANTS[job.variant]) or "(the recipe)",
        "updates": metadata.get("global_step"),
        "tokens_seen": metadata.get("tokens_seen"),
        "train_seconds": metadata.get("train_seconds"),
        "validation_ppl": validation,
    }
    brown = evaluated.perplexity[0]
    row.update(
        brown_ppl=brown.average,
        brown_unigram_ppl=brown.unigram.average if brown.unigram else None,
        brown_unk_rate=brown.unk_rate,
    )
    for score in evaluated.scores:
        if score.task in PROBE_TASKS and score.metric == "accuracy" and score.representation == "mix":
            row[f"{score.task}_mix"] = score.value
            if score.baseline_name == MOST_FREQUENT_TAG:
                row[f"{score.task}_most_frequent_tag"] = score.baseline
            if score.untrained is not None:
                row[f"{score.task}_mix_untrained"] = score.untrained.value
    return row


def cell(value, fmt="{:.1f}") -> str:
    return "—" if value is None else fmt.format(value)


def markdown(rows: list[dict], args: argparse.Namespace) -> str:
    """One line per variant and mark; with a --before-python environment, its figures beside this one's."""
    packages = list(dict.fromkeys(r["package"] for r in rows))
    marks = ", ".join(f"{m:g}" for m in args.minutes)
    lines = [
        f"`elmo-cpu` on `lm-corpus`, one thread per run (`--parallel {args.parallel}`), models after {marks} minutes "
        "of training (snapshots of one run per variant and package where the package has --save-at-minutes); "
        f"Brown: the first {args.brown_sentences} sentences, unigram fitted on masc.txt; probes: "
        f"{args.probe_train_examples} training examples, dev splits, learned scalar mix; POS beside the "
        "most-frequent-tag baseline." + (f" Every run with `{args.extra_flags}`." if args.extra_flags else ""),
        "",
    ]
    columns = ["updates", "tokens", "Brown ppl (unigram)", "sentiment dev", "POS dev (most frequent tag)"]
    if len(packages) > 1:
        columns = [f"{c} {p}" for c in columns for p in packages]
    lines += ["| variant | minutes | " + " | ".join(columns) + " |", "|---|---:|" + "---|" * len(columns)]
    by_point = {(r["variant"], r["minutes"], r["package"]): r for r in rows}
    for variant, minutes in dict.fromkeys((r["variant"], r["minutes"]) for r in rows):
        found = [by_point.get((variant, minutes, p), {}) for p in packages]
        cells = [
            [cell(r.get("updates"), "{:,}") for r in found],
            [cell(r.get("tokens_seen"), "{:,}") for r in found],
            [f"{cell(r.get('brown_ppl'))} ({cell(r.get('brown_unigram_ppl'), '{:.0f}')})" for r in found],
            [cell(r.get("probe-sentiment_mix"), "{:.1%}") for r in found],
            [
                f"{cell(r.get('probe-pos_mix'), '{:.1%}')} ({cell(r.get('probe-pos_most_frequent_tag'), '{:.1%}')})"
                for r in found
            ],
        ]
        lines.append(f"| {variant} | {minutes:g} | " + " | ".join(c for column in cells for c in column) + " |")
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
    parser.add_argument(
        "--minutes",
        type=parse_minutes,
        default=[10.0],
        help="training minutes: one mark (default 10) or several, e.g. 10,30,60: one run per variant trains for the "
        "last, and its snapshots at the others are scored too",
    )
    parser.add_argument(
        "--before-python",
        type=Path,
        default=None,
        help="the Python of another environment (e.g. a git worktree of an earlier commit with its own venv): each "
        "variant also trains with that package, side by side, and the table gets its columns beside this one's",
    )
    parser.add_argument("--before-label", default="before", help="the name of its columns (default: before)")
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--brown-sentences", type=int, default=1000)
    parser.add_argument("--probe-train-examples", type=int, default=3000)
    parser.add_argument("--probe-dev-examples", type=int, default=None, help="dev sentences per probe (default: all)")
    parser.add_argument(
        "--extra-flags", default="", help="more `elmo pretrain` flags for every run (a quick check of the machinery)"
    )
    parser.add_argument("--table-only", action="store_true", help="only summarise the points that are done")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    if args.before_label in ("", "after") or not args.before_label.replace("-", "").isalnum():
        parser.error(f"--before-label must be letters, digits and dashes other than 'after', got {args.before_label!r}")
    if args.before_python is not None and not os.access(args.before_python, os.X_OK):
        parser.error(f"--before-python {str(args.before_python)!r} is not an executable file")
    args.data_dir, args.output_dir = args.data_dir.absolute(), args.output_dir.absolute()
    if args.before_python is not None:
        args.before_python = args.before_python.absolute()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    jobs = plan_jobs(names, args)
    if not args.table_only:
        started = time.time()
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            for future in [pool.submit(run_job, job, args, i == 0) for i, job in enumerate(jobs)]:
                future.result()
        print(f"all runs done in {(time.time() - started) / 60:.1f} minutes", file=sys.stderr)
    rows = [
        summarise(job, minutes, model)
        for job in jobs
        for minutes, model in job.points
        if RunFolder(model).evaluation.results_file.is_file()
    ]
    rows.sort(key=lambda r: (names.index(r["variant"]), r["minutes"]))
    table = markdown(rows, args)
    (args.output_dir / "study.md").write_text(table, encoding="utf-8")
    (args.output_dir / "study.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
