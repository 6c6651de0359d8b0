"""ElmoModel forward throughput and memory on the CPU, per form of the recurrence, against the machine's matmul peak.

    python scripts/bench/bench_forward.py --threads 1,2 --shapes 32x20,8x50 [--preset elmo-original]

Forms (``--forms``, each shape, thread count and form measured in its own process, so that its peak RSS is its own):
  * ``packed``: the installed package's recurrence (``config.use_packed_kernels``: per-direction threads, per-step
    products on weights packed for oneDNN/MKL, private torch operators), fp32;
  * ``public``: the public-API form the files shipped with a model run (a model loaded with ``trust_remote_code=True``
    without the package, or with ``use_packed_kernels=False`` in its config): ``modeling_elmo.stacked_lstm``, fp32;
  * ``automodel``: the model saved and loaded back as ``AutoModel.from_pretrained(folder, trust_remote_code=True)``
    loads it where the package is installed: the folder's own code, which finds the package's packed recurrence by
    itself (``modeling_elmo.installed_kernels``); reports the recurrence it ran, fp32;
  * ``allennlp``: AllenNLP's own ``_ElmoBiLm`` (unmodified) on the same weights written as an original release
    (``options.json`` + ``weights.hdf5``), run by ``allennlp_forward.py`` in ``--allennlp-python`` (a virtual
    environment with allennlp 2.10; this interpreter where it has allennlp; skipped with one line where neither),
    with the largest difference of each layer from the public form;
  * ``public_threads`` / ``public_columns``: prototypes (``scripts/prototypes/public_prototypes.py``): the public
    form with each direction on its own Python thread / with the state as columns, with the largest difference from
    the public form;
  * ``bf16`` / ``bf16_public``: the package form / the public form with the model in bfloat16 (products in bf16,
    the recurrence's state, cell and gate sums in fp32), with the largest difference per layer from the fp32 packed
    form relative to that layer's standard deviation;
  * ``loop`` (the reference loop), ``torch`` (``torch.lstm(proj_size=...)``, both clips off), ``baseline`` (a
    straightforward per-time-step port: every product inside the time loop, Conv1d character CNN).
Each process times its form and a 2048 x 2048 fp32 matmul (bf16 forms: also a bf16 matmul) in turns, ``--repeats``
rounds, best of each kept (bf16 forms run only where the CPU has native bf16, or with ``--force-bf16``), and
reports tokens/s, FLOP/s as a fraction of the same-run matmul peak (bf16 forms: of
the bf16 peak), the RSS after building the model and the peak RSS of the process after the forward calls (so the
forward's own memory is the difference). FLOPs counted: character CNN, highway, projection and LSTM matrix products
of every position the LSTMs process (boundaries included). ``--floor`` adds the matrix-product floor (every product
of one forward alone in its fastest form, summed); ``--tokenizer`` the tokenizer's words/s. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers.dynamic_module_utils import get_class_from_dynamic_module

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from modeling_elmo import BOS_CHAR_IDS, EOS_CHAR_IDS, ElmoConfig, ElmoModel, encode_words  # noqa: E402
from modeling_elmo.conversion.original_writer import write_original_release  # noqa: E402
from modeling_elmo.utils.capability import bf16_supported  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "scripts" / "prototypes"))
from forward_timing import best_time, rss_mb, time_forward  # noqa: E402
from public_prototypes import PROTOTYPES, use_prototype  # noqa: E402


def cpu_name() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def forward_flops(config: ElmoConfig, batch: int, tokens: int) -> float:
    positions = batch * (tokens + 2)
    C, d = config.max_characters_per_token, config.char_embedding_dim
    cnn = sum(2 * (C - w + 1) * w * d * n for w, n in config.char_cnn_filters)
    Fw, P, H = config.num_char_cnn_filters, config.projection_dim, config.cell_size
    highway = config.num_highway_layers * 2 * 2 * Fw * Fw
    projection = 2 * Fw * P
    lstm = 2 * config.num_hidden_layers * (2 * P * 4 * H * 2 + 2 * H * P)
    return positions * (cnn + highway + projection + lstm)


def matrix_product_floor(config: ElmoConfig, batch: int, tokens: int, repeats: int) -> dict:
    """Time every matrix product of one forward pass standalone, each in its fastest form here (the per-step LSTM
    products with MKL-packed weights where available), and add them up: the time a forward pass cannot go under
    without faster GEMMs. Its FLOP/s, as a fraction of the square-matmul peak, is the ceiling this shape allows."""
    positions = batch * (tokens + 2)
    C, d = config.max_characters_per_token, config.char_embedding_dim
    Fw, P, H = config.num_char_cnn_filters, config.projection_dim, config.cell_size
    packed = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")

    def product(m: int, k: int, n: int, per_step: bool = False) -> float:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        if per_step and packed:
            pw = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
            return best_time(lambda: torch.ops.mkl._mkl_linear(x, pw, w, b, m), repeats * 5)
        return best_time(lambda: F.linear(x, w, b), repeats * 2)

    parts = {
        "char_cnn": sum(product(positions * (C - w + 1), d * w, n) for w, n in config.char_cnn_filters),
        "highway": config.num_highway_layers * 2 * product(positions, Fw, Fw),
        "projection": product(positions, Fw, P),
        "lstm_input": 2 * config.num_hidden_layers * product(positions, P, 4 * H),
        "lstm_recurrent": 2 * config.num_hidden_layers * (tokens + 2) * product(batch, P, 4 * H, per_step=True),
        "lstm_projection": 2 * config.num_hidden_layers * (tokens + 2) * product(batch, H, P, per_step=True),
    }
    return {"seconds": sum(parts.values()), "seconds_by_part": parts}


def baseline_forward(model: ElmoModel, input_ids: torch.Tensor) -> list[torch.Tensor]:
    """Per-time-step reference: every product inside the loop, Conv1d CNN, no de-duplication (same weights)."""
    config, enc = model.config, model.char_encoder
    mask = (input_ids > 0).any(-1)
    lengths = mask.sum(1)
    batch, steps, width = input_ids.shape
    ids = input_ids.new_zeros(batch, steps + 2, width)
    ids[:, 1:-1] = input_ids
    ids[:, 0] = torch.as_tensor(BOS_CHAR_IDS)
    ids[torch.arange(batch), lengths + 1] = torch.as_tensor(EOS_CHAR_IDS)
    x = enc.char_embeddings(ids.view(-1, width)).transpose(1, 2)
    x = torch.cat([torch.relu(conv(x).amax(-1)) for conv in enc.convolutions], -1)
    for hw in enc.highways:
        x = hw(x)
    e = enc.projection(x).view(batch, steps + 2, -1)
    outputs = [torch.cat([e, e], -1)]

    def run(layers, inputs):
        outs = []
        for index, layer in enumerate(layers):
            h = inputs.new_zeros(batch, config.projection_dim)
            c = inputs.new_zeros(batch, config.cell_size)
            ys = []
            for t in range(inputs.shape[1]):
                gates = layer.input_transform(inputs[:, t]) + layer.recurrent_transform(h)
                i, f, g, o = gates.chunk(4, 1)
                c = (torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)).clamp(-config.cell_clip, config.cell_clip)
                h = layer.projection(torch.sigmoid(o) * torch.tanh(c)).clamp(-config.proj_clip, config.proj_clip)
                ys.append(h)
            y = torch.stack(ys, 1)
            if index > 0:
                y = y + inputs
            outs.append(y)
            inputs = y
        return outs

    forward = run(model.encoder.forward_layers, e)
    backward = run(model.encoder.backward_layers, e.flip(1))  # same work as a per-row reversal
    return outputs + [torch.cat([f, b.flip(1)], -1) for f, b in zip(forward, backward, strict=False)]


def random_input(batch: int, tokens: int, seed: int = 0) -> torch.Tensor:
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10)))
        for _ in range(batch * tokens)
    ]
    return torch.as_tensor(encode_words(words)).view(batch, tokens, -1)


def bench_tokenizer(repeats: int) -> dict:
    rng = random.Random(0)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyzéü") for _ in range(rng.randint(1, 12))) for _ in range(50_000)
    ]

    def per_character(ws):
        rows = []
        for w in ws:
            row = [259]
            for byte in w.encode("utf-8")[:48]:
                row.append(byte + 1)
            row.append(260)
            row += [261] * (50 - len(row))
            rows.append(row)
        return torch.tensor(rows)

    ours = best_time(lambda: encode_words(words), repeats)
    naive = best_time(lambda: per_character(words), repeats)
    return {
        "words": len(words),
        "vectorised_words_per_s": len(words) / ours,
        "per_character_words_per_s": len(words) / naive,
        "speedup": naive / ours,
    }


FORMS = ("packed", "public", "automodel", "allennlp", "bf16", "bf16_public", "loop", "torch", "baseline", *PROTOTYPES)
NO_ALLENNLP = "no Python with allennlp: give --allennlp-python PATH (docs/benchmarks.md says how to make one)"


def build_model(preset: str, form: str) -> ElmoModel:
    """The preset's model (seed 0: every form gets the same weights) in ``form``."""
    config = ElmoConfig.from_json_file(str(REPO / "configuration" / f"{preset}.json"))
    config.lstm_implementation = {"loop": "loop", "torch": "torch", "baseline": "loop"}.get(form, "fused")
    if form == "torch":
        config.cell_clip = config.proj_clip = None
    config.use_packed_kernels = form in ("packed", "bf16", "automodel")  # the others run what they name
    torch.manual_seed(0)
    model = ElmoModel(config).eval()
    if form == "automodel":
        with tempfile.TemporaryDirectory(prefix="bench-forward-automodel-") as folder:
            model.save_pretrained(folder)
            # the folder's own code, as AutoModel(trust_remote_code=True) gives it where the package's classes are not
            # registered (they are in this process)
            return get_class_from_dynamic_module("modeling_elmo.ElmoModel", folder).from_pretrained(folder).eval()
    if form.startswith("bf16"):
        model = model.to(torch.bfloat16)
    if form in PROTOTYPES:
        return use_prototype(model, form)
    return model


def layer_error(model: ElmoModel, preset: str, ids: torch.Tensor) -> list[float]:
    """Per layer, the largest difference of ``model``'s output from the fp32 packed form, over that layer's std."""
    reference = build_model(preset, "packed")
    ours = model(input_ids=ids, output_hidden_states=True).hidden_states
    exact = reference(input_ids=ids, output_hidden_states=True).hidden_states
    return [((a.float() - b).abs().max() / b.std()).item() for a, b in zip(ours, exact, strict=True)]


def measure(preset: str, form: str, batch: int, tokens: int, threads: int, repeats: int) -> dict:
    """One form at one shape and thread count, in this process (see the module's docstring)."""
    torch.set_num_threads(threads)
    model = build_model(preset, form)
    rss_model = rss_mb()
    ids = random_input(batch, tokens)
    flops = forward_flops(model.config, batch, tokens)
    forward = (lambda: baseline_forward(model, ids)) if form == "baseline" else lambda: model(input_ids=ids)
    extra = None
    if form.startswith("bf16"):
        a16, b16 = torch.randn(1024, 1024, dtype=torch.bfloat16), torch.randn(1024, 1024, dtype=torch.bfloat16)
        extra = {"matmul_bf16": lambda: a16 @ b16}
    result = {**time_forward(forward, flops, batch * tokens, repeats, extra), "rss_model_mb": rss_model}
    if form == "automodel":
        with torch.inference_mode():
            chosen = model.encoder.recurrence_for(torch.zeros(1, 1, 1, 1), True)
        result["module"], result["recurrence"] = type(model).__module__, f"{chosen.__module__}.{chosen.__name__}"
    if form in PROTOTYPES:  # the same model with the shipped recurrence again
        with torch.inference_mode():
            ours = torch.stack(model(input_ids=ids, output_hidden_states=True).hidden_states)
            model.encoder.recurrence = None
            public = torch.stack(model(input_ids=ids, output_hidden_states=True).hidden_states)
        result["largest_difference_from_public"] = (ours - public).abs().max().item()
    if form.startswith("bf16"):
        peak = 2 * 1024**3 / result.pop("seconds_of")["matmul_bf16"]
        result["fraction_of_matmul_peak"] = flops / result["seconds"] / peak
        result["matmul_bf16_peak_gflops"] = peak / 1e9
        with torch.inference_mode():
            result["layer_error_over_std"] = layer_error(model, preset, ids)
    return result


def run_json(command: list[str], threads: str, what: str) -> dict:
    """Run one measuring process with ``threads`` OpenMP threads; its JSON line, or exit naming ``what`` failed."""
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": threads})
    if done.returncode:
        raise SystemExit(f"{Path(command[1]).stem}: {what} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def allennlp_python(given: str | None) -> str | None:
    """The interpreter of the allennlp form: ``--allennlp-python``, else this one where it has allennlp, else None."""
    if given:
        return given
    return sys.executable if importlib.util.find_spec("allennlp") else None


class AllennlpRuns:
    """The allennlp form: the preset's weights (seed 0, as every form) written once as an original release into a
    temporary folder, per shape the input ids, and the layers of AllenNLP's first call compared with the public
    form's."""

    def __init__(self, python: str, preset: str, repeats: int, folder: Path):
        self.python, self.repeats, self.folder = python, repeats, folder
        self.model = build_model(preset, "public")
        self.release = write_original_release(self.model, folder / "release")

    def measure(self, batch: int, tokens: int, threads: str) -> dict:
        ids = random_input(batch, tokens)
        ids_path, layers_path = self.folder / f"ids-{batch}x{tokens}.npy", self.folder / f"layers-{batch}x{tokens}.npz"
        np.save(ids_path, ids.numpy())
        options, weights = self.release
        command = [self.python, str(Path(__file__).with_name("allennlp_forward.py")), "--ids", str(ids_path)]
        command += ["--options", str(options), "--weights", str(weights), "--activations", str(layers_path)]
        command += ["--flops", str(forward_flops(self.model.config, batch, tokens)), "--threads", threads]
        result = run_json([*command, "--repeats", str(self.repeats)], threads, f"form allennlp at {batch}x{tokens}")
        with torch.inference_mode():
            ours = torch.stack(self.model(input_ids=ids, output_hidden_states=True).hidden_states)
        theirs = torch.from_numpy(np.load(layers_path, allow_pickle=False)["layers"])
        per_layer = (ours - theirs).abs().amax(dim=(1, 2, 3))
        result["largest_difference_from_public_per_layer"] = per_layer.tolist()
        return result


def speed_ratios(entry: dict) -> dict:
    """``A_over_B_speed`` (B's seconds over A's) for the pairs of measured forms that the docs compare."""
    pairs = [("public", "packed"), ("packed", "allennlp"), ("public", "allennlp"), ("bf16", "packed")]
    pairs += [("automodel", "public"), ("automodel", "packed"), ("automodel", "allennlp")]
    measured = {form for form, result in entry.items() if "seconds" in result}
    return {
        f"{a}_over_{b}_speed" if a != "bf16" else "bf16_over_fp32_speed": entry[b]["seconds"] / entry[a]["seconds"]
        for a, b in pairs
        if {a, b} <= measured
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="elmo-original")
    parser.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", default="32x20,8x50", help="comma-separated BATCHxTOKENS")
    parser.add_argument(
        "--forms", default="packed,public,allennlp,bf16", help=f"comma-separated, of {', '.join(FORMS)}"
    )
    parser.add_argument("--allennlp-python", help="a Python with allennlp 2.10, for the allennlp form")
    parser.add_argument("--force-bf16", action="store_true", help="bf16 forms also on a CPU without native bf16")
    parser.add_argument("--floor", action="store_true", help="also the matrix-product floor of each shape")
    parser.add_argument("--tokenizer", action="store_true", help="also the tokenizer's words/s")
    parser.add_argument("--skip-baseline", action="store_true", help="leave the per-time-step baseline out of --forms")
    parser.add_argument("--skip-torch", action="store_true", help="leave torch.nn.LSTM out of --forms")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # FORM:BATCHxTOKENS:THREADS, measured in this process
    args = parser.parse_args(argv)
    if args.one:
        form, shape, threads = args.one.split(":")
        batch, tokens = map(int, shape.split("x"))
        print(json.dumps(measure(args.preset, form, batch, tokens, int(threads), args.repeats)))
        return 0
    skipped = {name for name, skip in (("baseline", args.skip_baseline), ("torch", args.skip_torch)) if skip}
    forms = [form for form in args.forms.split(",") if form not in skipped]
    unknown = sorted(set(forms) - set(FORMS))
    if unknown:
        parser.error(f"--forms: unknown {', '.join(unknown)}; choose from {', '.join(FORMS)}")
    if args.allennlp_python and not os.access(args.allennlp_python, os.X_OK):
        parser.error(f"--allennlp-python: {args.allennlp_python!r} is not an executable file")
    python = allennlp_python(args.allennlp_python) if "allennlp" in forms else None
    if "allennlp" in forms and python is None:
        print(f"bench_forward: the allennlp form is skipped: {NO_ALLENNLP}", file=sys.stderr)
    config = ElmoConfig.from_json_file(str(REPO / "configuration" / f"{args.preset}.json"))
    report = {"preset": args.preset, "torch": torch.__version__, "cpu": cpu_name(), "cpu_cores": os.cpu_count()}
    report["parameters"] = sum(p.numel() for p in build_model(args.preset, "public").parameters())
    report["runs"] = {}
    with tempfile.TemporaryDirectory(prefix="bench-forward-") as folder:
        allennlp = AllennlpRuns(python, args.preset, args.repeats, Path(folder)) if python else None
        for shape in args.shapes.split(","):
            batch, tokens = map(int, shape.split("x"))
            for threads in args.threads.split(","):
                entry = report["runs"][f"{shape}/{threads}"] = {}
                for form in forms:
                    if form.startswith("bf16") and not (args.force_bf16 or bf16_supported("cpu")):
                        entry[form] = {"skipped": "this CPU has no native bfloat16 (--force-bf16 measures it emulated)"}
                    elif form == "allennlp":
                        entry[form] = allennlp.measure(batch, tokens, threads) if allennlp else {"skipped": NO_ALLENNLP}
                    else:
                        command = [sys.executable, __file__, "--preset", args.preset, "--repeats", str(args.repeats)]
                        command += ["--one", f"{form}:{shape}:{threads}"]
                        entry[form] = run_json(command, threads, f"form {form} at {shape}/{threads}")
                entry.update(speed_ratios(entry))
                if args.floor:
                    torch.set_num_threads(int(threads))
                    entry["matrix_product_floor"] = matrix_product_floor(config, batch, tokens, args.repeats)
    if args.tokenizer:
        report["tokenizer"] = bench_tokenizer(args.repeats)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
