"""Throughput of ``elmo embed``: sentences per second on a file of corpus lines, for random models of two shapes.

    OMP_NUM_THREADS=1 python scripts/bench/bench_embed.py --lines 1000            # quick CPU run
    python scripts/bench/bench_embed.py --device cuda --dtype bfloat16             # 100,000 lines on a GPU

The input file is built in a temporary folder from the one-sentence-per-line files of ``shared/data/lm-corpus``
(``brown.txt``, ``masc.txt``; override the folder with ``ELMO_SHARED_DATA``), repeated if needed. Each model runs the
whole `modeling_elmo.embedding.embed.embed_file` pipeline (streaming, length sorting, chunk files, merge), with random
weights (the speed does not depend on the values). Prints one JSON object.

Two references are measured in the same run:
  * ``baseline``: the first ``--baseline-lines`` lines embedded batch after batch in file order (no length sorting,
    no files, no kept word vectors), the way a simple loop over the model (AllenNLP's old command) would;
    ``speedup_over_baseline`` is the pipeline's sentences/s over the baseline's;
  * ``matmul_peak_gflops``: a square matrix product in the compute dtype on the device; ``fraction_of_matmul_peak``
    is the pipeline's useful FLOP/s (the forward pass's matrix products at every position the biLM runs, words
    and the two boundaries, padding excluded; counted as in ``bench_forward.py``) over that peak.
With ``--allennlp-python PY`` (a Python with allennlp 2.10, docs/benchmarks.md), ``against_allennlp``: the whole
``elmo embed --all`` command against the loop of AllenNLP's old ``allennlp elmo`` command on AllenNLP's own biLM
(`allennlp_embed.py` in ``PY``: file order, batches of 64, every layer to HDF5), each in its own process, on the same
weights written as an original release, for each of ``--threads`` (1,2), alternating which runs first, ``--rounds``
(2) rounds: seconds, CPU seconds, peak RSS and load averages of every run, tokens/s of the best runs, ``speedup``
(AllenNLP's best seconds over the package's), ``cpu_seconds_ratio`` (the same for CPU seconds), ``memory_ratio``
(package over AllenNLP), and the outputs' largest difference on the first batch
(``--only-allennlp``: that comparison alone)::

    OMP_NUM_THREADS=1 python scripts/bench/bench_embed.py --lines 10000 --models small --only-allennlp \
        --allennlp-python allennlp-env/bin/python

With ``--word-vectors-lines N``: ``kept_word_vectors_off_and_on``, the first N lines embedded in sorted batches with the
embedder's kept word vectors off and on, in turns (the seconds of each, and the speedup of the best times).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer  # noqa: E402
from modeling_elmo.conversion.original_writer import write_original_release  # noqa: E402
from modeling_elmo.embedding.embed import embed_file  # noqa: E402
from modeling_elmo.embedding.inference import DTYPES, ElmoEmbedder  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forward import cpu_name, forward_flops  # noqa: E402

CORPUS_FILES = ("brown.txt", "masc.txt")
SHAPES = {
    "tiny": "elmo-tiny.json",
    "cpu": "elmo-cpu.json",
    "small": "elmo-small.json",
    "original": "elmo-original.json",
}


def shared_data() -> Path:
    return Path(os.environ.get("ELMO_SHARED_DATA", REPO.parent / "shared" / "data"))


def synthetic_lines(seed: int = 0):
    """Endless sentences of a Zipfian vocabulary of random words, 22 words long on average (the corpus's mean), for
    machines without the shared data (the speed depends on lengths and word counts, not on the words)."""
    import random

    rng = random.Random(seed)
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12))) for _ in range(50_000)
    ]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    while True:
        yield " ".join(rng.choices(vocab, weights, k=max(1, int(rng.expovariate(1 / 22))))) + "\n"


def write_input(path: Path, num_lines: int, synthetic: bool = False) -> dict:
    sources = [shared_data() / "lm-corpus" / name for name in CORPUS_FILES]
    missing = [str(s) for s in sources if not s.is_file()]
    if missing and not synthetic:
        raise SystemExit(f"bench_embed: corpus files not found: {missing} (set ELMO_SHARED_DATA, or pass --synthetic).")

    def corpus_lines():
        if synthetic:
            yield from synthetic_lines()
        for source in sources:
            with open(source, encoding="utf-8") as handle:
                yield from (line for line in handle if line.strip())

    tokens = 0
    with open(path, "w", encoding="utf-8") as out:
        for line in itertools.islice(itertools.cycle(corpus_lines()), num_lines):
            out.write(line)
            tokens += len(line.split())
    return {"lines": num_lines, "tokens": tokens, "mean_tokens_per_line": round(tokens / max(num_lines, 1), 2)}


def load_shape(name: str) -> ElmoConfig:
    with open(REPO / "configuration" / SHAPES[name]) as handle:
        fields = json.load(handle)
    fields.pop("model_type", None)
    return ElmoConfig(**fields)


def matmul_peak(device: str, dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best-of FLOP/s of an (n x n) @ (n x n) product in ``dtype`` on ``device``."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):  # the first is a warm-up
        if a.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if a.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def baseline_sentences_per_second(embedder: ElmoEmbedder, path: Path, num_lines: int, batch_size: int) -> dict:
    """Embed the first ``num_lines`` lines in file order, ``batch_size`` at a time: no sorting, no output files, the
    model's own forward on every batch (no kept word vectors: ``max_cached_words`` 0 for the loop, restored after)."""
    kept, embedder.max_cached_words = embedder.max_cached_words, 0
    try:
        return _baseline(embedder, path, num_lines, batch_size)
    finally:
        embedder.max_cached_words = kept


def _baseline(embedder: ElmoEmbedder, path: Path, num_lines: int, batch_size: int) -> dict:
    with open(path, encoding="utf-8") as handle:
        sentences = [line.split() for _, line in zip(range(num_lines), handle, strict=False)]
    sentences = [s for s in sentences if s]
    batches = [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]
    embedder.embed_batch(batches[0][:2])  # warm-up
    if embedder.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for batch in batches:
        embedder.embed_batch(batch)
    seconds = time.perf_counter() - start
    return {
        "lines": len(sentences),
        "seconds": round(seconds, 3),
        "sentences_per_second": round(len(sentences) / seconds, 1),
    }


def kept_word_vectors_comparison(embedder: ElmoEmbedder, path: Path, num_lines: int, batch_size: int) -> dict:
    """Seconds to embed the first ``num_lines`` lines in length-sorted batches (`ElmoEmbedder.embed_sentences`) with
    the kept word vectors off and on (each from none kept), in turns, two rounds; the speedup of the best times."""
    with open(path, encoding="utf-8") as handle:
        sentences = [line.split() for _, line in zip(range(num_lines), handle, strict=False)]
    kept, seconds = embedder.max_cached_words, {"off": [], "on": []}
    try:
        for modes in (("off", "on"), ("on", "off")):
            for mode in modes:
                embedder.word_vectors.clear()
                embedder.max_cached_words = kept if mode == "on" else 0
                start = time.perf_counter()
                embedder.embed_sentences(sentences, batch_size=batch_size, show_progress=False)
                seconds[mode].append(time.perf_counter() - start)
    finally:
        embedder.word_vectors.clear()
        embedder.max_cached_words = kept
    speedup = min(seconds["off"]) / min(seconds["on"])
    rounded = {mode: [round(x, 3) for x in values] for mode, values in seconds.items()}
    return {"lines": len(sentences), "seconds": rounded, "speedup": round(speedup, 3)}


#: Runs argv[2:] and writes its exit status, peak RSS (KB) and CPU seconds to argv[1]: a small process between the
#: benchmark and the measured one, because a child's ``ru_maxrss`` starts at its parent's resident size at the fork
#: (Linux keeps the larger of the two across ``exec``): this one's is a few MB, the benchmark's holds torch and a model.
RSS_LAUNCHER = (
    "import json, os, subprocess, sys\n"
    "process = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(process.pid, 0)\n"
    "process.returncode = os.waitstatus_to_exitcode(status)\n"
    "with open(sys.argv[1], 'w') as out:\n"
    "    json.dump([process.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime], out)\n"
)


def timed_process(command: list[str], threads: int, log: Path) -> dict:
    """Run ``command`` with ``threads`` OpenMP threads (this checkout first on the import path); its wall seconds,
    CPU seconds (user and system, all its threads: less sensitive than the wall time to other work on the machine),
    peak RSS (the kernel's ``ru_maxrss`` of that process, through `RSS_LAUNCHER`) and the load averages before it.
    Exits naming the command when it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    load = [round(x, 2) for x in os.getloadavg()]
    usage = log.with_suffix(".rusage.json")
    with open(log, "w", encoding="utf-8") as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", RSS_LAUNCHER, str(usage), *command], stdout=out, stderr=out, env=env)
        seconds = time.perf_counter() - start
    status, max_rss_kb, cpu_seconds = json.loads(usage.read_text())
    if status:
        text = log.read_text(encoding="utf-8", errors="replace")
        raise SystemExit(f"bench_embed: {Path(command[1]).name} failed (status {status}):\n{text[-3000:]}")
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "peak_rss_mb": round(max_rss_kb / 1024, 1),
        "load_before": load,
    }


def allennlp_comparison(
    config: ElmoConfig,
    src: Path,
    folder: Path,
    python: str,
    threads: list[int],
    rounds: int,
    batch_size: int,
    dtype: str = "float32",
) -> dict:
    """`elmo embed --all` (the whole command, in its own process) against AllenNLP's loop (`allennlp_embed.py` in
    ``python``, its own process: file order, batches of 64, every layer to HDF5) on the same weights (seed 0, written
    as an original release), for each thread count, alternating which runs first, ``rounds`` rounds. Per thread
    count: each run's `timed_process` figures, the tokens/s of the best run of each, ``speedup`` (AllenNLP's best
    seconds over the package's), ``cpu_seconds_ratio`` (the same for CPU seconds) and ``memory_ratio`` (the
    package's largest peak RSS over AllenNLP's); and the largest difference between the two outputs on the first
    batch (AllenNLP's state is fresh there only). ``dtype``: the package's compute dtype (`elmo embed --dtype`;
    AllenNLP's loop runs in float32)."""
    torch.manual_seed(0)
    model = ElmoModel(config).eval()
    model_dir = folder / "model"
    model.save_pretrained(model_dir)
    ElmoTokenizer().save_pretrained(model_dir)
    options, weights = write_original_release(model, folder / "release")
    del model
    outputs = {"package": folder / "package.h5", "allennlp": folder / "allennlp.h5"}
    commands = {
        "package": [sys.executable, "-m", "modeling_elmo.embedding.embed", str(src), str(outputs["package"])]
        + ["--model", str(model_dir), "--all", "--device", "cpu", "--no-progress", "--batch-size", str(batch_size)]
        + ["--dtype", dtype],
        "allennlp": [python, str(Path(__file__).with_name("allennlp_embed.py")), str(src), str(outputs["allennlp"])]
        + ["--options", str(options), "--weights", str(weights), "--batch-size", "64"],
    }
    with open(src, encoding="utf-8") as handle:
        tokens = sum(len(line.split()) for line in handle)
    runs = {n: {impl: [] for impl in commands} for n in threads}
    for round_index in range(rounds):
        order = list(commands) if round_index % 2 == 0 else list(reversed(commands))
        for n in threads:
            for impl in order:
                outputs[impl].unlink(missing_ok=True)
                runs[n][impl].append(timed_process(commands[impl], n, folder / f"{impl}.log"))
    result = {"tokens": tokens, "threads": {}}
    for n in threads:
        best = {impl: min(r["seconds"] for r in runs[n][impl]) for impl in commands}
        peak = {impl: max(r["peak_rss_mb"] for r in runs[n][impl]) for impl in commands}
        cpu = {impl: min(r["cpu_seconds"] for r in runs[n][impl]) for impl in commands}
        result["threads"][str(n)] = {
            "runs": runs[n],
            "tokens_per_second": {impl: round(tokens / best[impl], 1) for impl in commands},
            "speedup": round(best["allennlp"] / best["package"], 2),
            "cpu_seconds_ratio": round(cpu["allennlp"] / cpu["package"], 2),
            "memory_ratio": round(peak["package"] / peak["allennlp"], 2),
        }
    result["largest_difference_first_batch"] = first_batch_difference(outputs, batch_size=64)
    return result


def first_batch_difference(outputs: dict[str, Path], batch_size: int) -> float:
    """The largest absolute difference between the two HDF5 outputs over the lines of AllenNLP's first batch."""
    import h5py
    import numpy as np

    largest = 0.0
    with h5py.File(outputs["package"], "r") as ours, h5py.File(outputs["allennlp"], "r") as theirs:
        for key in (str(i) for i in range(batch_size)):
            if key in theirs:
                largest = max(largest, float(np.abs(ours[key][()] - theirs[key][()]).max(initial=0.0)))
    return largest


def allennlp_python(given: str | None) -> str | None:
    """The interpreter of the allennlp baseline: ``--allennlp-python``, else this one where it has allennlp."""
    if given:
        return given
    return sys.executable if importlib.util.find_spec("allennlp") else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--models", default="tiny,small", help=f"comma-separated shapes from {sorted(SHAPES)}")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument("--mode", choices=("all", "top", "average"), default="all")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--synthetic", action="store_true", help="random Zipfian sentences instead of the corpus lines")
    parser.add_argument(
        "--baseline-lines", type=int, default=1000, help="lines embedded by the unsorted baseline (at most --lines)"
    )
    parser.add_argument(
        "--word-vectors-lines",
        type=int,
        default=0,
        help="also time this many lines with the embedder's kept word vectors off and on, in turns (0: not)",
    )
    parser.add_argument(
        "--allennlp-python",
        help="a Python with allennlp 2.10 (docs/benchmarks.md): also run the whole `elmo embed --all` against "
        "AllenNLP's loop, each in its own process",
    )
    parser.add_argument("--threads", default="1,2", help="thread counts of the allennlp comparison (default 1,2)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the allennlp comparison, alternating (2)")
    parser.add_argument(
        "--only-allennlp", action="store_true", help="run the allennlp comparison only (no in-process measurements)"
    )
    args = parser.parse_args(argv)
    try:
        threads = [int(n) for n in args.threads.split(",") if n.strip()]
    except ValueError:
        threads = []
    if not threads or min(threads) < 1 or args.rounds < 1:
        raise SystemExit(
            f"bench_embed: --threads must list positive integers and --rounds be positive, got "
            f"{args.threads!r} and {args.rounds}."
        )
    python = allennlp_python(args.allennlp_python)
    if args.only_allennlp and python is None:
        raise SystemExit(
            "bench_embed: --only-allennlp needs --allennlp-python (a Python with allennlp 2.10, docs/benchmarks.md)."
        )
    if args.lines < 1 or args.baseline_lines < 1:
        raise SystemExit(
            f"bench_embed: --lines and --baseline-lines must be positive, got {args.lines} and {args.baseline_lines}."
        )
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"bench_embed: unknown model shape(s) {unknown}; choose from {sorted(SHAPES)}.")

    results = {
        "device": args.device,
        "dtype": args.dtype,
        "torch_threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "mode": args.mode,
        "torch": torch.__version__,
        "cpu": cpu_name(),
        "cpu_cores": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else None,
        "matmul_peak_gflops": round(matmul_peak(args.device, DTYPES[args.dtype]) / 1e9, 1),
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "input.txt"
        results["input"] = write_input(src, args.lines, args.synthetic)
        for name in names:
            if python is not None:
                folder = Path(tmp) / f"{name}-allennlp"
                folder.mkdir()
                against = allennlp_comparison(
                    load_shape(name), src, folder, python, threads, args.rounds, args.batch_size, args.dtype
                )
                results.setdefault("against_allennlp", {})[name] = against
            if args.only_allennlp:
                continue
            torch.manual_seed(0)
            config = load_shape(name)
            embedder = ElmoEmbedder(ElmoModel(config), ElmoTokenizer(), device=args.device, dtype=DTYPES[args.dtype])
            out = Path(tmp) / f"{name}.h5"
            start = time.perf_counter()
            report = embed_file(
                src,
                out,
                embedder,
                mode=args.mode,
                batch_size=args.batch_size,
                chunk_size=args.chunk_size,
                show_progress=False,
            )
            wall = time.perf_counter() - start
            speed = report.embedded_lines / report.seconds
            baseline = baseline_sentences_per_second(
                embedder, src, min(args.baseline_lines, args.lines), args.batch_size
            )
            comparison = None
            if args.word_vectors_lines > 0:
                comparison = kept_word_vectors_comparison(
                    embedder, src, min(args.word_vectors_lines, args.lines), args.batch_size
                )
            positions = report.num_tokens + 2 * (report.embedded_lines - report.blank_lines)
            achieved = positions * forward_flops(config, 1, 1) / 3 / report.seconds  # forward_flops counts 3 positions
            results["models"][name] = {
                "parameters": sum(p.numel() for p in embedder.model.parameters()),
                "layers_x_width": [config.num_representation_layers, config.hidden_size],
                "embed_seconds": round(report.seconds, 3),
                "wall_seconds_with_merge": round(wall, 3),
                "sentences_per_second": round(speed, 1),
                "tokens_per_second": round(report.num_tokens / report.seconds, 1),
                "baseline": baseline,
                "speedup_over_baseline": round(speed / baseline["sentences_per_second"], 2),
                "achieved_gflops": round(achieved / 1e9, 2),
                "fraction_of_matmul_peak": round(achieved / (results["matmul_peak_gflops"] * 1e9), 4),
                "output_megabytes": round(out.stat().st_size / 2**20, 1),
            }
            if comparison is not None:
                results["models"][name]["kept_word_vectors_off_and_on"] = comparison
            out.unlink()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
