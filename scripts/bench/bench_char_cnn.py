"""The character CNN (``ElmoCharacterEncoder.convolve``: every filter width, max over positions, activation) on the
distinct words of a batch, per piece size (words per matrix product), each piece size in its own process: best
seconds of ``--repeats`` calls and the rise of the process's peak RSS over the built encoder.

    OMP_NUM_THREADS=2 python scripts/bench/bench_char_cnn.py --threads 2 --shape 32x20 --pieces auto,4096,256,64

``auto`` is the model's own choice (`ElmoCharacterEncoder.piece_sizes`: in inference on a CPU about 2**22 numbers in the
largest product, 93 words of ``elmo-original``); ``4096`` puts every word of a 32x20 batch in one piece. Batches
are `bench_forward.random_input` (random words of full length). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forward import REPO, random_input, run_json  # noqa: E402
from forward_timing import best_time, rss_mb  # noqa: E402

from modeling_elmo import ElmoConfig  # noqa: E402  (bench_forward put the checkout on the path)
from modeling_elmo.modeling_elmo import ElmoCharacterEncoder  # noqa: E402


def measure(preset: str, piece: str, batch: int, tokens: int, threads: int, repeats: int) -> dict:
    """One piece size in this process: the CNN (`ElmoCharacterEncoder.convolve` over the pieces) alone."""
    torch.set_num_threads(threads)
    config = ElmoConfig.from_json_file(str(REPO / "configuration" / f"{preset}.json"))
    torch.manual_seed(0)
    encoder = ElmoCharacterEncoder(config).eval()
    words = torch.unique(random_input(batch, tokens).flatten(0, 1), dim=0)
    before = rss_mb("VmHWM")
    with torch.inference_mode():
        embedded = encoder.char_embeddings(words)
        size = encoder.piece_sizes(embedded)[0] if piece == "auto" else int(piece)
        seconds = best_time(lambda: torch.cat([encoder.convolve(part) for part in embedded.split(size)]), repeats)
    return {
        "words": len(words),
        "words_per_piece": size,
        "seconds": seconds,
        "peak_rss_rise_mb": rss_mb("VmHWM") - before,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="elmo-original")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shape", default="32x20", help="BATCHxTOKENS")
    parser.add_argument("--pieces", default="auto,4096,512,256,128,64,32", help="comma-separated; auto or words")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a piece size, measured in this process
    args = parser.parse_args(argv)
    batch, tokens = map(int, args.shape.split("x"))
    if args.one:
        print(json.dumps(measure(args.preset, args.one, batch, tokens, args.threads, args.repeats)))
        return 0
    for piece in args.pieces.split(","):
        if piece != "auto" and not (piece.isdigit() and int(piece) > 0):
            parser.error(f"--pieces: {piece!r} is neither auto nor a positive number of words")
    report = {"preset": args.preset, "shape": args.shape, "threads": args.threads, "pieces": {}}
    for piece in args.pieces.split(","):
        command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--one", piece]
        report["pieces"][piece] = run_json(command, str(args.threads), f"piece size {piece}")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
