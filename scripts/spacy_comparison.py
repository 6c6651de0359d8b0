#!/usr/bin/env python
"""spaCy components trained by `spacy train` on an ELMo tok2vec (`elmo.Tok2Vec.v1`) and on spaCy's default
`HashEmbedCNN`, on the same sentences (thin shell over `modeling_elmo.integrations.spacy_training.compare_tok2vecs`):
a tagger on the first 2,000 UD English EWT training sentences (TAG_ACC on dev) and a text classifier on the first
10,000 SST-2 training sentences (accuracy and macro F on dev).

    OMP_NUM_THREADS=1 python scripts/spacy_comparison.py BILM --data-dir ../shared/data --output-dir runs/spacy
        [--tasks tagger textcat] [--tagger-steps 800] [--textcat-steps 1000]

Prints a Markdown table and writes it with the rows (JSON) into the output folder. See docs/embed.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from modeling_elmo.integrations.spacy_training import TASKS, compare_tok2vecs
except ModuleNotFoundError as error:  # the package is not installed (scripts never import the clone's folder)
    if not (error.name or "").startswith("modeling_elmo"):
        raise
    sys.exit(
        "scripts/spacy_comparison.py: the modeling_elmo package is not installed: run `pip install .` in the clone "
        "(or `bash scripts/install.sh` for a virtual environment with the test tools)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/spacy_comparison.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("bilm", help="the ELMo folder or Hub id")
    parser.add_argument("--data-dir", required=True, help="the folder holding pos-ud-ewt/ and sentiment-sst2/")
    parser.add_argument("--output-dir", required=True, help="where the DocBins and the trained pipelines go")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--tagger-steps", type=int, default=800, help="updates of each tagger (default: 800)")
    parser.add_argument("--textcat-steps", type=int, default=1000, help="updates of each classifier (default: 1000)")
    args = parser.parse_args(argv)
    rows = compare_tok2vecs(
        args.bilm,
        args.data_dir,
        args.output_dir,
        tasks=args.tasks,
        max_steps={"tagger": args.tagger_steps, "textcat": args.textcat_steps},
    )
    lines = ["| task | tok2vec | train sentences | updates | dev score | minutes |", "|---|---|---|---|---|---|"]
    for row in rows:
        if row["task"] == "tagger":
            score = f"TAG_ACC {100 * row['tag_acc']:.2f}"
        else:
            score = f"accuracy {100 * row['cats_micro_f']:.2f}, macro F {100 * row['cats_macro_f']:.2f}"
        lines.append(
            f"| {row['task']} | `{row['tok2vec']}` | {row['train_sentences']:,} | {row['updates']:,} | {score} | "
            f"{row['seconds'] / 60:.1f} |"
        )
    table = "\n".join(lines)
    print(table)
    output = Path(args.output_dir)
    (output / f"comparison-{'-'.join(args.tasks)}.json").write_text(json.dumps(rows, indent=2) + "\n")
    (output / f"comparison-{'-'.join(args.tasks)}.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
