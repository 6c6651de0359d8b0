"""Evaluation suite of `modeling_elmo`: perplexity with a unigram baseline, a nearest-neighbour
word-sense probe that reports ties, and linear probes (sentiment, POS) on cached frozen features.
Run it with ``elmo evaluate`` (`main`, defined in `modeling_elmo.evaluation.cli`); it writes the results schema of
`modeling_elmo.utils.results` into the model's evaluation folder
(`modeling_elmo.folders.run_folder.EvaluationFolder`)."""

from .cli import main
from .data import read_conllu, read_ptb_tagged, read_sst2, read_text_sentences, read_wsd_jsonl
from .metrics import accuracy, masked_token_accuracy
from .wsd import DEFAULT_WSD_SET, build_wsd_subset, score_nearest_neighbour

__all__ = [
    "DEFAULT_WSD_SET",
    "accuracy",
    "build_wsd_subset",
    "main",
    "masked_token_accuracy",
    "read_conllu",
    "read_ptb_tagged",
    "read_sst2",
    "read_text_sentences",
    "read_wsd_jsonl",
    "score_nearest_neighbour",
]
