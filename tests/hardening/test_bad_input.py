"""The bad-input table of ``docs/bad-input.md``, walked row by row: each input gives exactly the line the table
promises, and nothing is written.

A row's message is compared in full; a message the table ends with `` ...`` is compared up to there (the rest names
tensors or paths). Commands run in-process through the ``elmo`` entry point, in a folder prepared with a small model,
text files and broken inputs; ``test_the_table_lists_exactly_these_rows`` keeps the documentation and this module
in step. (Pretraining has its own section and test module, ``test_bad_input_pretraining.py``.)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForPreTraining

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy_reference as ref  # noqa: E402
from efml_fixtures import legacy_cuda_bytes, write_efml_model, zip_folder  # noqa: E402

from modeling_elmo import (  # noqa: E402
    ElmoConfig,
    ElmoForBidirectionalLM,
    ElmoForSequenceClassification,
    ElmoModel,
    ElmoTokenizer,
    cli,
    load_elmo_model,
    save_model_folder,
)
from modeling_elmo.conversion.original_format import convert_config  # noqa: E402
from modeling_elmo.embedding.inference import ElmoEmbedder  # noqa: E402
from modeling_elmo.utils.config_checks import check_config, config_from_dict, load_config  # noqa: E402
from modeling_elmo.utils.results import EvaluationResults, write_results  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"
SECTIONS = ("library", "elmo embed", "elmo evaluate", "elmo convert", "elmo push")


@dataclasses.dataclass(frozen=True)
class Row:
    where: str  # a section of the table
    given: str  # the input, as the table shows it
    message: str  # the line the user sees (a trailing " ..." means: this prefix)
    run: Callable[[], object]  # raises the error (library) or runs the command (argv list)


def _tiny_config(**extra) -> ElmoConfig:
    values = dict(
        projection_dim=8,
        cell_size=16,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        num_highway_layers=1,
        vocab_size=34,
    )
    return ElmoConfig(**{**values, **extra})


def _huge_options() -> dict:
    options = ref.tiny_options()
    return {**options, "char_cnn": {**options["char_cnn"], "filters": [[1, 10**9]]}}


def _encode(words):
    return ElmoTokenizer()([words], is_split_into_words=True, return_tensors="pt")


def _model_call(dtype=None, fill=None):
    def run():
        enc = _encode(["a", "b"])
        ids = enc["input_ids"]
        if fill is not None:
            ids = ids.clone().fill_(fill)
        if dtype is not None:
            ids = ids.to(dtype)
        ElmoModel(_tiny_config())(input_ids=ids, attention_mask=enc["attention_mask"])

    return run


def _lm_labels(label):
    return lambda: ElmoForBidirectionalLM(_tiny_config())(**_encode(["a", "b"]), labels=torch.tensor([[5, label]]))


def _float_class_labels():
    model = ElmoForSequenceClassification(_tiny_config(num_labels=3, problem_type="single_label_classification"))
    return model(**_encode(["a", "b"]), labels=torch.tensor([1.5]))


ROWS = [
    # ------------------------------------------------------------------ library
    Row(
        "library",
        "`check_config(ElmoConfig(cell_clip=float('nan')))`",
        "`cell_clip` must be a finite positive number or None (no clipping), got nan.",
        lambda: check_config(ElmoConfig(cell_clip=float("nan"))),
    ),
    Row(
        "library",
        "`config_from_dict({'num_labels': -3})`",
        "`num_labels` must be an integer >= 1, got -3.",
        lambda: config_from_dict({"num_labels": -3}),
    ),
    Row(
        "library",
        "`check_config(ElmoConfig(vocab_size=500, lm_softmax='sampled'))`",
        "`num_negative_samples` (8192) must be smaller than vocab_size (500) for a sampled softmax; use "
        "lm_softmax='full' for a small vocabulary.",
        lambda: check_config(ElmoConfig(vocab_size=500, lm_softmax="sampled")),
    ),
    Row(
        "library",
        "`load_config('empty')` (a folder without `config.json`)",
        "'empty' holds no config.json: it is not a saved model.",
        lambda: load_config("empty"),
    ),
    Row(
        "library",
        "`load_config('bert')` (a BERT folder)",
        "'bert' holds a 'bert' model, not an ELMo model (model_type 'bert' instead of 'elmo').",
        lambda: load_config("bert"),
    ),
    Row(
        "library",
        "`tokenizer(texts, truncation=True, max_length=-1)`",
        "`max_length` must be a positive integer (a number of words) or None, got -1.",
        lambda: ElmoTokenizer()(["a b c"], truncation=True, max_length=-1),
    ),
    Row(
        "library",
        "`tokenizer(['a', 3])`",
        "item 1 of the batch is not a string but int 3; for pre-split words pass is_split_into_words=True.",
        lambda: ElmoTokenizer()(["a", 3]),
    ),
    Row(
        "library",
        "`model(input_ids=ids.to(torch.uint8))`",
        "input_ids must be int16/32/64 character ids in [0, 261], got dtype torch.uint8.",
        _model_call(dtype=torch.uint8),
    ),
    Row(
        "library",
        "`model(input_ids=ids)` with an id of 300",
        "input_ids hold a character id outside [0, 261].",
        _model_call(fill=300),
    ),
    Row(
        "library",
        "`lm(..., labels=...)` with a label of -7 (only -100 is ignored)",
        "labels hold a word id outside [0, 34) (only -100 marks a position to ignore).",
        _lm_labels(-7),
    ),
    Row(
        "library",
        "`classifier(..., labels=torch.tensor([1.5]))` (single-label)",
        "labels must be integer class ids, got dtype torch.float32.",
        _float_class_labels,
    ),
    Row(
        "library",
        "`load_elmo_model('mismatch')` (weights of another shape than `config.json`)",
        "the weights of model 'mismatch' do not match its config.json: 14 tensor(s) with another shape than "
        "config.json implies, saved vs expected ...",
        lambda: load_elmo_model("mismatch"),
    ),
    Row(
        "library",
        "`load_elmo_model('pickled')` (only a `pytorch_model.bin`)",
        "pickled holds pickled weights ['pytorch_model.bin']: loading a pickle can run arbitrary code, so this "
        "package refuses it and loads safetensors only. ...",
        lambda: load_elmo_model("pickled"),
    ),
    Row(
        "library",
        "`ElmoTokenizer(vocab_file='dup.txt')` (a word listed twice)",
        "vocabulary file 'dup.txt': line 3 repeats the word 'w1' (a repeated word would shift the id of every "
        "later word).",
        lambda: ElmoTokenizer(vocab_file="dup.txt"),
    ),
    Row(
        "library",
        "`check_config(ElmoConfig(max_characters_per_token=10**6))` (also a `config.json` loaded by the CLI)",
        "`max_characters_per_token` must be an integer in [3, 1,024] (characters per word), got 1000000.",
        lambda: check_config(ElmoConfig(max_characters_per_token=10**6)),
    ),
    Row(
        "library",
        "`convert_config(options)` with `char_cnn.filters` `[[1, 10**9]]` (also a `config.json` loaded by the CLI)",
        "options.json describes a model of 4e+18 parameters (char_cnn_filters: 1,000,000,000 filters, projection_dim "
        "8, cell_size 24, vocab_size 4), more than the 1e+10 this package builds; the file is damaged or not meant for "
        "it.",
        lambda: convert_config(_huge_options()),
    ),
    Row(
        "library",
        "`load_elmo_model('shadow')` (`config.json` holds `\"to_dict\": 1`)",
        "config key 'to_dict' is not a setting: it would replace ElmoConfig.to_dict.",
        lambda: load_elmo_model("shadow"),
    ),
    Row(
        "library",
        "`AutoModel.from_pretrained('cuda', trust_remote_code=True)` (`config.json` holds "
        '`"lstm_implementation": "cuda"`; also `ElmoConfig(lstm_implementation=\'cuda\')`)',
        "`lstm_implementation` must be one of 'auto', 'loop', 'fused', 'torch'; got 'cuda'.",
        lambda: AutoModel.from_pretrained("cuda", trust_remote_code=True),
    ),
    Row(
        "library",
        '`AutoModel.from_pretrained(\'textclip\', trust_remote_code=True)` (`config.json` holds `"cell_clip": "3"`)',
        "`cell_clip` must be a finite positive number or None (no clipping), got '3'.",
        lambda: AutoModel.from_pretrained("textclip", trust_remote_code=True),
    ),
    Row(
        "library",
        "`AutoModel.from_pretrained('layers1000', trust_remote_code=True)` (`config.json` holds "
        '`"num_hidden_layers": 1000` beside small weights; the same for `num_highway_layers`)',
        "`num_hidden_layers` must be an integer in [1, 64] (layers), got 1000.",
        lambda: AutoModel.from_pretrained("layers1000", trust_remote_code=True),
    ),
    Row(
        "library",
        "`AutoModel.from_pretrained('chars10', trust_remote_code=True)` (`config.json` holds `\"num_characters\": 10`)",
        "`num_characters` must be 262 (256 bytes + 5 markers + the padding id 0), got 10.",
        lambda: AutoModel.from_pretrained("chars10", trust_remote_code=True),
    ),
    Row(
        "library",
        '`load_elmo_model(\'classkey\')` (`config.json` holds `"__class__": "ElmoConfig"`; every command that '
        "reads a model folder alike)",
        "config key '__class__' is not a setting: it would replace ElmoConfig.__class__.",
        lambda: load_elmo_model("classkey"),
    ),
    Row(
        "library",
        "`AutoModelForPreTraining.from_pretrained('bos7', trust_remote_code=True)` (`config.json` holds "
        '`"bos_token_id": 7`; the language model\'s loss and scores would predict word 7 for `<S>`)',
        "ElmoForBidirectionalLM predicts <S> and </S> as words 1 and 2 of every ELMo vocabulary, but "
        "config.bos_token_id=7.",
        lambda: AutoModelForPreTraining.from_pretrained("bos7", trust_remote_code=True),
    ),
    Row(
        "library",
        "`model.resize_token_embeddings(10**9)` (a model with a word input)",
        "new_num_tokens=1000000000: `word_input_vocab_size` must be an integer in [0, 100,000,000], got 1000000000.",
        lambda: ElmoModel(_tiny_config(word_input_vocab_size=10, word_input_dim=6)).resize_token_embeddings(10**9),
    ),
    Row(
        "library",
        "`model.resize_token_embeddings(13257)` (a character model)",
        "ElmoModel reads characters and has no token-embedding table to resize (config.word_input_vocab_size is 0); "
        "its character table is fixed by the alphabet.",
        lambda: ElmoModel(_tiny_config()).resize_token_embeddings(13257),
    ),
    Row(
        "library",
        "`load_elmo_model('truncated')` (its `model.safetensors` cut short)",
        "weights file 'truncated/model.safetensors' is truncated: tensor ...",
        lambda: load_elmo_model("truncated"),
    ),
    Row(
        "library",
        "`load_elmo_model('nan')` (a NaN in `model.safetensors`)",
        "the weights of model 'nan' hold NaN or infinite values in 1 tensor(s) (char_encoder.char_embeddings.weight); "
        "every vector computed from them would be NaN. Refusing to run it.",
        lambda: load_elmo_model("nan"),
    ),
    Row(
        "library",
        "`embedder.embed_sentences(['hello world', 'x'])` (strings, not word lists)",
        "sentence 0 is a str ('hello world'), not a list of words; split it first (text.split(), or the tokenizer's "
        "split_words).",
        lambda: ElmoEmbedder(ElmoModel(_tiny_config()), ElmoTokenizer()).embed_sentences(["hello world", "x"]),
    ),
    # ------------------------------------------------------------------ elmo embed
    Row(
        "elmo embed",
        "`elmo embed text.txt text.txt --model lm --top --overwrite`",
        "elmo embed: error: output 'text.txt' is the input file 'text.txt'; writing it would destroy the input. "
        "Choose another output.",
        ["embed", "text.txt", "text.txt", "--model", "lm", "--top", "--overwrite"],
    ),
    Row(
        "elmo embed",
        "`elmo embed binary.bin out.h5 --model lm --top`",
        "elmo embed: error: input file 'binary.bin' is not text: it has a NUL byte at offset 0 (a binary file, or "
        "UTF-16 text; elmo embed reads UTF-8 text, one sentence per line).",
        ["embed", "binary.bin", "out.h5", "--model", "lm", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt text.txt/out.h5 --model lm --top` (a path under a file)",
        "elmo embed: error: the output's folder 'text.txt' is a file, not a folder.",
        ["embed", "text.txt", "text.txt/out.h5", "--model", "lm", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model bert --top`",
        "elmo embed: error: 'bert' is not an ELMo model: its config.json has model_type 'bert', not 'elmo'.",
        ["embed", "text.txt", "out.h5", "--model", "bert", "--top"],
    ),
    Row(
        "elmo embed",
        '`elmo embed text.txt out.h5 --model labels --top` (`config.json` holds `"id2label": "pos,neg"`)',
        "elmo embed: error: `id2label` must be an object mapping labels, got str 'pos,neg'.",
        ["embed", "text.txt", "out.h5", "--model", "labels", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model mismatch --top`",
        "elmo embed: error: the weights of model 'mismatch' do not match its config.json: 14 tensor(s) with another "
        "shape than config.json implies, saved vs expected ...",
        ["embed", "text.txt", "out.h5", "--model", "mismatch", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt notes.txt --model lm --top --overwrite` (a file elmo embed did not write)",
        "elmo embed: error: output 'notes.txt' exists and is not an HDF5 file written by elmo embed; --overwrite "
        "replaces only those. Choose another output.",
        ["embed", "text.txt", "notes.txt", "--model", "lm", "--top", "--overwrite"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model truncated --top` (its `model.safetensors` cut short)",
        "elmo embed: error: weights file 'truncated/model.safetensors' is truncated: tensor ...",
        ["embed", "text.txt", "out.h5", "--model", "truncated", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model nan --top` (a NaN in `model.safetensors`)",
        "elmo embed: error: the weights of model 'nan' hold NaN or infinite values in 1 tensor(s) "
        "(char_encoder.char_embeddings.weight); every vector computed from them would be NaN. Refusing to run it.",
        ["embed", "text.txt", "out.h5", "--model", "nan", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model widetok --top` (`tokenizer_config.json` says 60 characters "
        "per word, `config.json` 50)",
        "elmo embed: error: the tokenizer writes 60 characters per word (max_characters_per_token in "
        "tokenizer_config.json) but the model reads 50 (config.json); the two files belong to different models.",
        ["embed", "text.txt", "out.h5", "--model", "widetok", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model ./lm-typo --top` (a mistyped path: never sent to the Hub)",
        "elmo embed: error: model './lm-typo' does not exist (no such folder)",
        ["embed", "text.txt", "out.h5", "--model", "./lm-typo", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model wide --top` (`config.json` declares 65536-wide LSTM cells "
        "beside a `model.safetensors` of 300 KB: refused before anything is allocated)",
        "elmo embed: error: the weights of model 'wide' do not match its config.json: 16 tensor(s) with another shape "
        "than config.json implies, saved vs expected ...",
        ["embed", "text.txt", "out.h5", "--model", "wide", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model deep --top` (its `config.json` nested 200,000 deep)",
        "elmo embed: error: config.json in 'deep' is not valid JSON: maximum recursion depth exceeded ...",
        ["embed", "text.txt", "out.h5", "--model", "deep", "--top"],
    ),
    Row(
        "elmo embed",
        "`elmo embed text.txt out.h5 --model mixednames --top` (`model.safetensors` holds an LSTM tensor under its "
        "older name `...weight_hr` and its current one `...projection.weight`; `elmo upgrade mixednames` alike)",
        "elmo embed: error: model 'mixednames' holds both 'elmo.encoder.forward_layers.0.weight_hr' (an older LSTM "
        "parameter name) and 'elmo.encoder.forward_layers.0.projection.weight' (its current name): it mixes two "
        "checkpoints; keep one of the two tensors.",
        ["embed", "text.txt", "out.h5", "--model", "mixednames", "--top"],
    ),
    # ------------------------------------------------------------------ elmo evaluate
    Row(
        "elmo evaluate",
        "`elmo evaluate empty --task perplexity --text text.txt`",
        "elmo evaluate: error: empty is not a model folder: it is empty.",
        ["evaluate", "empty", "--task", "perplexity", "--text", "text.txt"],
    ),
    Row(
        "elmo evaluate",
        "`elmo evaluate bert --task perplexity --text text.txt`",
        "elmo evaluate: error: bert holds a model of type 'bert' (config.json), not an ELMo model.",
        ["evaluate", "bert", "--task", "perplexity", "--text", "text.txt"],
    ),
    Row(
        "elmo evaluate",
        '`elmo evaluate negclip --task perplexity --text text.txt` (`config.json` holds `"cell_clip": -1`)',
        "elmo evaluate: error: `cell_clip` must be a finite positive number or None (no clipping), got -1.",
        ["evaluate", "negclip", "--task", "perplexity", "--text", "text.txt"],
    ),
    Row(
        "elmo evaluate",
        "`elmo evaluate lm --task perplexity --text binary.bin`",
        "elmo evaluate: error: text file 'binary.bin' is not text: line 1 holds a NUL byte (a binary file?)",
        ["evaluate", "lm", "--task", "perplexity", "--text", "binary.bin"],
    ),
    Row(
        "elmo evaluate",
        "`elmo evaluate evaluated --task perplexity --text text.txt` (its `evaluation/eval_results.json` "
        "holds another model's results)",
        "elmo evaluate: error: evaluated/evaluation/eval_results.json holds the results of model 'other', not "
        "'evaluated'; choose another --output-dir.",
        ["evaluate", "evaluated", "--task", "perplexity", "--text", "text.txt"],
    ),
    Row(
        "elmo evaluate",
        "`elmo evaluate mismatch --task perplexity --text text.txt`",
        "elmo evaluate: error: the weights of model 'mismatch' do not match its config.json: ...",
        ["evaluate", "mismatch", "--task", "perplexity", "--text", "text.txt"],
    ),
    Row(
        "elmo evaluate",
        "`elmo evaluate nan --task perplexity --text text.txt`",
        "elmo evaluate: error: the weights of model 'nan' hold NaN or infinite values in 1 tensor(s) "
        "(elmo.char_encoder.char_embeddings.weight); every vector computed from them would be NaN. Refusing to run "
        "it.",
        ["evaluate", "nan", "--task", "perplexity", "--text", "text.txt"],
    ),
    Row(
        "elmo evaluate",
        "`elmo evaluate lm/nope --task perplexity --text text.txt` (`lm/` is a local folder: a path, not a Hub id)",
        "elmo evaluate: error: model 'lm/nope' does not exist (no such folder)",
        ["evaluate", "lm/nope", "--task", "perplexity", "--text", "text.txt"],
    ),
    # ------------------------------------------------------------------ elmo convert
    Row(
        "elmo convert",
        "`elmo convert --options missing.json --weights weights.hdf5 --output out`",
        "elmo convert: error: options file 'missing.json' does not exist.",
        ["convert", "--options", "missing.json", "--weights", "release/weights.hdf5", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert ... --weights damaged.hdf5` (its tail overwritten)",
        "elmo convert: error: weights file 'damaged.hdf5' is damaged or truncated ...",
        ["convert", "--options", "release/options.json", "--weights", "damaged.hdf5", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert ... --output text.txt/out` (a path under a file)",
        "elmo convert: error: output folder 'text.txt/out' cannot be created: ...",
        [
            "convert",
            "--options",
            "release/options.json",
            "--weights",
            "release/weights.hdf5",
            "--output",
            "text.txt/out",
        ],
    ),
    Row(
        "elmo convert",
        "`elmo convert --options release/options.json --weights release/weights.hdf5 --output release --overwrite`",
        "elmo convert: error: output folder 'release' holds the input file 'release/options.json'; writing the output "
        "would delete it. Choose another output folder.",
        [
            "convert",
            "--options",
            "release/options.json",
            "--weights",
            "release/weights.hdf5",
            "--output",
            "release",
            "--overwrite",
        ],
    ),
    Row(
        "elmo convert",
        "`elmo convert ... --output converted --overwrite` (`converted` holds the user's `notes.txt` "
        "beside an earlier conversion)",
        "elmo convert: error: output folder 'converted' holds files that are not elmo convert's (elmo convert did not "
        "write 'notes.txt'); nothing was deleted. Choose another folder, or move those files away.",
        [
            "convert",
            "--options",
            "release/options.json",
            "--weights",
            "release/weights.hdf5",
            "--output",
            "converted",
            "--overwrite",
        ],
    ),
    Row(
        "elmo convert",
        "`elmo convert ... --output edited --overwrite` (an earlier conversion whose `README.md` the user edited)",
        "elmo convert: error: output folder 'edited' holds files that are not elmo convert's ('README.md' differs from "
        "what elmo convert wrote: changed since); nothing was deleted. Choose another folder, or move those files "
        "away.",
        [
            "convert",
            "--options",
            "release/options.json",
            "--weights",
            "release/weights.hdf5",
            "--output",
            "edited",
            "--overwrite",
        ],
    ),
    Row(
        "elmo convert",
        "`elmo convert ... --output locked` (`locked.lock`, where the lock goes, a link to the user's `notes.txt`)",
        "elmo convert: error: cannot write next to the output folder 'locked': lock file 'locked.lock' is a symbolic "
        "link, not a regular file; refusing to use it (remove it if it is not yours to keep).",
        ["convert", "--options", "release/options.json", "--weights", "release/weights.hdf5", "--output", "locked"],
    ),
    Row(
        "elmo convert",
        "`elmo convert ... --atol nan` (or -1)",
        "elmo convert: error: --atol must be a finite number > 0 (the largest accepted difference to the reference), "
        "got nan.",
        [
            "convert",
            "--options",
            "release/options.json",
            "--weights",
            "release/weights.hdf5",
            "--output",
            "out",
            "--atol",
            "nan",
        ],
    ),
    Row(
        "elmo convert",
        "`elmo convert --options hollow/options.json --weights hollow/weights.hdf5 --output out` (15,000 "
        "filters declared in a file of 24 KB)",
        "elmo convert: error: weights file 'hollow/weights.hdf5' is damaged or truncated (dataset ...",
        ["convert", "--options", "hollow/options.json", "--weights", "hollow/weights.hdf5", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert --efml hooked.model --output out` (a pickle naming a function)",
        "elmo convert: error: encoder.pkl references posix.system: a weight file holds only tensors and ordered dicts "
        "...",
        ["convert", "--efml", "hooked.model", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert --efml evil.zip --output out` (a member `../escaped.txt`)",
        "elmo convert: error: evil.zip holds '../escaped.txt', a path outside the folder it unpacks into; nothing was "
        "unpacked.",
        ["convert", "--efml", "evil.zip", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert --efml nan.model --output out` (one NaN in `token_embedder.pkl`)",
        "elmo convert: error: token_embedder.pkl: tensor 'projection.weight' holds 1 NaN or infinite value(s); a model "
        "converted from it would compute NaN, so it is refused.",
        ["convert", "--efml", "nan.model", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert --efml strided.model --output out` (9 KB of pickles whose tensors are stride-0 "
        "views declaring 16384-wide LSTMs)",
        "elmo convert: error: encoder.pkl: tensor 'forward_layer_0.input_linearity.weight' of shape (65536, 16384) is "
        "a stride-0 view (one stored value repeated): a weight file stores every value of every tensor, so it is "
        "refused.",
        ["convert", "--efml", "strided.model", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert --efml bomb.zip --output out` (its `encoder.pkl` inflates to 64 MB of zeros)",
        "elmo convert: error: bomb.zip holds 'model/encoder.pkl', which inflates from ...",
        ["convert", "--efml", "bomb.zip", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert --efml two.zip --output out` (a zip holding two models)",
        "elmo convert: error: 'two.zip' is not an ELMoForManyLangs model: 2 folders hold an encoder.pkl.",
        ["convert", "--efml", "two.zip", "--output", "out"],
    ),
    Row(
        "elmo convert",
        '`elmo convert --efml efml.model --architecture clip.json --output out` (`"cell_clip": [1]`)',
        'elmo convert: error: architecture file \'clip.json\': "encoder"."cell_clip" must be a number >= 0 (0: no '
        "clipping) or null, got [1].",
        ["convert", "--efml", "efml.model", "--architecture", "clip.json", "--output", "out"],
    ),
    Row(
        "elmo convert",
        "`elmo convert --efml superscript.model --output out` (a `char.dic` line `x<TAB>²`)",
        "elmo convert: error: char.dic line 3 is not 'token<TAB>id' (the id a number): 'x\\t²'.",
        ["convert", "--efml", "superscript.model", "--output", "out"],
    ),
    # ------------------------------------------------------------------ elmo push
    Row(
        "elmo push",
        "`elmo push missing --repo-id me/elmo --dry-run`",
        "elmo push: error: model folder 'missing' does not exist or is not a folder.",
        ["push", "missing", "--repo-id", "me/elmo", "--dry-run"],
    ),
    Row(
        "elmo push",
        "`elmo push lm --repo-id 'bad id' --dry-run`",
        "elmo push: error: invalid repository id 'bad id': Repo id must use alphanumeric chars ...",
        ["push", "lm", "--repo-id", "bad id", "--dry-run"],
    ),
    Row(
        "elmo push",
        "`elmo push pickled --repo-id me/elmo --dry-run`",
        "elmo push: error: pickled holds pickled weights ['pytorch_model.bin']: loading a pickle can run arbitrary "
        "code ...",
        ["push", "pickled", "--repo-id", "me/elmo", "--dry-run"],
    ),
    Row(
        "elmo push",
        "`elmo push linked --repo-id me/elmo --dry-run` (its `perplexity.png` a link to a file outside it)",
        "elmo push: error: linked/perplexity.png links outside the model folder (to ...",
        ["push", "linked", "--repo-id", "me/elmo", "--dry-run"],
    ),
    Row(
        "elmo push",
        "`elmo push nan --repo-id me/elmo --dry-run` (a NaN in `model.safetensors`)",
        "elmo push: error: nan/model.safetensors: tensor 'elmo.char_encoder.char_embeddings.weight' holds 1 non-finite "
        "value(s) (NaN or infinity): refusing to publish a broken model.",
        ["push", "nan", "--repo-id", "me/elmo", "--dry-run"],
    ),
    Row(
        "elmo push",
        "`elmo push shortvocab --repo-id me/elmo --dry-run` (a `vocab.txt` of 5 words beside a softmax of 34 rows)",
        "elmo push: error: the tokenizer's vocabulary (vocab.txt) has 9 words but the model's softmax has 34 rows "
        "(config.json vocab_size): word ids would point at other words' rows. Publish the vocabulary the model was "
        "trained with.",
        ["push", "shortvocab", "--repo-id", "me/elmo", "--dry-run"],
    ),
    Row(
        "elmo push",
        '`elmo push shadow --repo-id me/elmo --dry-run` (`config.json` holds `"to_dict": 1`)',
        "elmo push: error: config key 'to_dict' is not a setting: it would replace ElmoConfig.to_dict.",
        ["push", "shadow", "--repo-id", "me/elmo", "--dry-run"],
    ),
    Row(
        "elmo push",
        "`elmo push lm --repo-id me/elmo --dry-run --output-dir proj` (`proj` holds the user's `README.md`)",
        "elmo push: error: output folder 'proj' holds files that are not elmo push's (elmo push did not write "
        "'README.md'); nothing was deleted. Choose another folder, or move those files away.",
        ["push", "lm", "--repo-id", "me/elmo", "--dry-run", "--output-dir", "proj"],
    ),
]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A working folder with a small language model, text, and broken inputs of every kind (built once)."""
    root = tmp_path_factory.mktemp("bad-input")
    torch.manual_seed(0)
    (root / "vocab.txt").write_text("\n".join(f"w{i}" for i in range(30)) + "\n")
    tokenizer = ElmoTokenizer(vocab_file=str(root / "vocab.txt"))
    save_model_folder(ElmoForBidirectionalLM(_tiny_config()), tokenizer, root / "lm")
    (root / "text.txt").write_text("w1 w2 w3\nw4 w5\n")
    (root / "binary.bin").write_bytes(b"\x00\x01\x02" * 100)
    (root / "empty").mkdir()
    (root / "bert").mkdir()
    (root / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    shutil.copytree(root / "lm", root / "mismatch")  # weights of a wider model under the same config.json
    save_model_folder(ElmoForBidirectionalLM(_tiny_config(projection_dim=12)), None, root / "wide")
    shutil.copyfile(root / "wide" / "model.safetensors", root / "mismatch" / "model.safetensors")
    shutil.rmtree(root / "wide")
    (root / "pickled").mkdir()
    ElmoModel(_tiny_config()).config.save_pretrained(root / "pickled")
    torch.save({"x": torch.zeros(1)}, root / "pickled" / "pytorch_model.bin")
    (root / "release").mkdir()
    ref.write_original_files(root / "release", ref.tiny_options(), seed=0)
    data = (root / "release" / "weights.hdf5").read_bytes()
    (root / "damaged.hdf5").write_bytes(data[: len(data) // 2] + b"\xff" * (len(data) - len(data) // 2))
    (root / "dup.txt").write_text("w0\nw1\nw1\nw2\n")
    (root / "notes.txt").write_text("my notes\n")
    shutil.copytree(root / "lm", root / "evaluated")
    (root / "evaluated" / "evaluation").mkdir()
    write_results(
        root / "evaluated" / "evaluation" / "eval_results.json",
        EvaluationResults.now(model="other", source="elmo evaluate"),
    )
    assert (
        cli.main(
            [
                "convert",
                "--options",
                str(root / "release" / "options.json"),
                "--weights",
                str(root / "release" / "weights.hdf5"),
                "--output",
                str(root / "converted"),
            ]
        )
        == 0
    )
    shutil.copytree(root / "converted", root / "edited")
    with open(root / "edited" / "README.md", "a", encoding="utf-8") as card:
        card.write("My notes on this model.\n")
    (root / "converted" / "notes.txt").write_text("mine\n")
    (root / "locked.lock").symlink_to("notes.txt")
    shutil.copytree(root / "lm", root / "linked")
    (root / "linked" / "perplexity.png").symlink_to(Path("..") / "text.txt")
    shutil.copytree(root / "lm", root / "nan")
    weights = load_file(root / "nan" / "model.safetensors")
    weights["elmo.char_encoder.char_embeddings.weight"][1, 0] = float("nan")
    save_file(weights, root / "nan" / "model.safetensors", metadata={"format": "pt"})
    shutil.copytree(root / "lm", root / "shortvocab")
    (root / "shortvocab" / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(5)))
    for name, key, value in (
        ("shadow", "to_dict", 1),
        ("labels", "id2label", "pos,neg"),
        ("negclip", "cell_clip", -1),
        ("classkey", "__class__", "ElmoConfig"),
        ("cuda", "lstm_implementation", "cuda"),
        ("textclip", "cell_clip", "3"),
        ("chars10", "num_characters", 10),
        ("bos7", "bos_token_id", 7),
        ("layers1000", "num_hidden_layers", 1000),
    ):
        shutil.copytree(root / "lm", root / name)
        config = json.loads((root / name / "config.json").read_text())
        (root / name / "config.json").write_text(json.dumps({**config, key: value}))
    shutil.copytree(root / "lm", root / "mixednames")
    weights = load_file(str(root / "mixednames" / "model.safetensors"))
    current = "elmo.encoder.forward_layers.0.projection.weight"
    weights["elmo.encoder.forward_layers.0.weight_hr"] = weights[current] + 1.0
    save_file(weights, str(root / "mixednames" / "model.safetensors"), metadata={"format": "pt"})
    (root / "proj").mkdir()
    (root / "proj" / "README.md").write_text("my project\n")
    shutil.copytree(root / "lm", root / "truncated")
    data = (root / "truncated" / "model.safetensors").read_bytes()
    (root / "truncated" / "model.safetensors").write_bytes(data[:-100])
    shutil.copytree(root / "lm", root / "widetok")
    config = json.loads((root / "widetok" / "tokenizer_config.json").read_text())
    (root / "widetok" / "tokenizer_config.json").write_text(json.dumps({**config, "max_characters_per_token": 60}))
    _hollow_release(root / "hollow", [[1, 15_000]])
    efml = write_efml_model(root / "efml" / "model")
    shutil.copytree(efml, root / "hooked.model")
    (root / "hooked.model" / "encoder.pkl").write_bytes(
        legacy_cuda_bytes({"weight": torch.zeros(1), "hook": os.system})
    )
    zip_folder(efml, root / "evil.zip")
    with zipfile.ZipFile(root / "evil.zip", "a") as handle:
        handle.writestr("../escaped.txt", "outside")
    _hostile_efml_inputs(root, efml)
    shutil.rmtree(root / "efml")
    shutil.copytree(root / "lm", root / "wide")
    config = json.loads((root / "wide" / "config.json").read_text())
    (root / "wide" / "config.json").write_text(json.dumps({**config, "cell_size": 65536}))
    shutil.copytree(root / "lm", root / "deep")
    (root / "deep" / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    return root


def _hostile_efml_inputs(root: Path, efml: Path) -> None:
    """ELMoForManyLangs models with a NaN, with stride-0 views declaring huge layers, a wrongly typed architecture
    value, a ``char.dic`` id that is not ASCII digits; a zip bomb and a zip of two models."""
    import collections

    from efml_fixtures import efml_weights

    from modeling_elmo.conversion.efml_format import PUBLISHED_ARCHITECTURE

    te, en = efml_weights()
    shutil.copytree(efml, root / "nan.model")
    te["projection.weight"][1, 2] = float("nan")
    (root / "nan.model" / "token_embedder.pkl").write_bytes(legacy_cuda_bytes(te))
    shutil.copytree(efml, root / "strided.model")
    width = 16384
    shapes = {
        "input_linearity.weight": (4 * width, width),
        "state_linearity.weight": (4 * width, width),
        "state_linearity.bias": (4 * width,),
        "state_projection.weight": (width, width),
    }
    strided = collections.OrderedDict((k, torch.zeros(1).expand(*shapes[k.split(".", 1)[1]])) for k in en)
    (root / "strided.model" / "encoder.pkl").write_bytes(legacy_cuda_bytes(strided))
    shutil.copytree(efml, root / "efml.model")
    (root / "clip.json").write_text(
        json.dumps({**PUBLISHED_ARCHITECTURE, "encoder": {**PUBLISHED_ARCHITECTURE["encoder"], "cell_clip": [1]}})
    )
    shutil.copytree(efml, root / "superscript.model")
    lines = (root / "superscript.model" / "char.dic").read_text(encoding="utf-8").split("\n")
    (root / "superscript.model" / "char.dic").write_text("\n".join(lines[:2] + ["x\t²"] + lines[3:]), encoding="utf-8")
    with zipfile.ZipFile(root / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(efml.iterdir()):
            handle.writestr(
                f"model/{path.name}", b"\x80\x02" + bytes(64 << 20) if path.name == "encoder.pkl" else path.read_bytes()
            )
    with zipfile.ZipFile(root / "two.zip", "w", zipfile.ZIP_DEFLATED) as handle:
        for inside in ("a", "b"):
            for path in sorted(efml.iterdir()):
                handle.write(path, f"{inside}/{path.name}")


def _hollow_release(folder: Path, filters: list[list[int]]) -> None:
    """``options.json`` with ``filters`` and a ``weights.hdf5`` declaring every dataset they imply, none written."""
    import h5py

    from modeling_elmo.conversion.convert import convert_config, expected_dataset_shapes

    options = ref.tiny_options(filters=filters, n_highway=1)
    folder.mkdir()
    (folder / "options.json").write_text(json.dumps(options))
    with h5py.File(folder / "weights.hdf5", "w") as h5:
        for name, shape in expected_dataset_shapes(convert_config(options)).items():
            h5.create_dataset(name, shape=shape, dtype="f4", chunks=tuple(min(n, 64) for n in shape))


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file() and "modules" not in p.parts
    }


def _message_of(row: Row, capsys) -> str:
    if callable(row.run):
        with pytest.raises(ValueError) as error:
            row.run()
        return str(error.value)
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(row.run))
    code = exit_.value.code
    if isinstance(code, str):
        return code
    assert code not in (0, None), "the command succeeded"
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    return lines[-1]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.where}: {r.given}" for r in ROWS])
def test_each_bad_input_gives_the_documented_line_and_writes_nothing(row, template, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    shutil.copytree(template, work, symlinks=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = _snapshot(work)
    message = _message_of(row, capsys)
    assert "\n" not in message.strip(), f"more than one line: {message!r}"
    if row.message.endswith(" ..."):
        assert message.startswith(row.message[:-4]), message
    else:
        assert message == row.message
    assert _snapshot(work) == before, "the bad input wrote or changed a file"


def _documented_rows() -> list[tuple[str, str, str]]:
    rows, section = [], None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## (.+)$", line)
        if heading:
            section = heading.group(1).strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")] if line.startswith("| ") else []
        if section in SECTIONS and len(cells) == 2 and not set(cells[0]) <= {"-"} and cells[0] != "input":
            rows.append((section, cells[0], cells[1]))
    return rows


def test_the_table_lists_exactly_these_rows():
    expected = [(r.where, r.given.replace("|", "\\|"), r.message.replace("|", "\\|")) for r in ROWS]
    assert _documented_rows() == expected
