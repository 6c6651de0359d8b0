"""Convert an ELMoForManyLangs model (a folder or the zip NLPL publishes) into an `ElmoModel` folder.

The converted model reads Unicode characters through a character vocabulary and has a word-embedding input, both
saved with its tokenizer (``char_vocab.json``, ``word_input_vocab.json``). The original's ids are laid out again:

==================================  ============================================================================
original                            converted
==================================  ============================================================================
``char.dic`` ``<pad>``              character id 1 (within-word padding); id 0 is a zero row (no token)
``<eow>`` / ``<bow>``               ids 2 (begin of word) / 3 (end of word): the original writes ``<eow>``'s id
                                    first and ``<bow>``'s last, so its rows are taken crosswise
``<bos>``, ``<eos>``, ``<oov>``     ids 4, 5, 6
the characters, by id               ids 7 on, in the same order (``char_vocab.json``)
``word.dic`` ``<pad> <bos> <eos>    word ids 0-3 (``<pad> <S> </S> <UNK>``), then the words by id
<oov>``                             (``word_input_vocab.json``)
``convolutions.{i}``                ``char_encoder.convolutions.{i}`` (same layout)
``highways._layers.{k}`` (2F, F)    ``.highways.{k}.transform`` = rows [:F]; ``.gate`` = minus rows [F:] (the
                                    original's gate keeps the input, this model's gate keeps the transform)
``projection`` (P, d_w + F)         ``char_encoder.projection`` (the word vector first, as in the original)
``{d}_layer_{l}``                   ``encoder.{d}_layers.{l}``: ``input_linearity`` -> ``input_transform``,
                                    ``state_linearity`` -> ``recurrent_transform`` and the input bias,
                                    ``state_projection`` -> ``projection`` (same gate order, no forget-bias shift)
==================================  ============================================================================

The converted model is then checked against `modeling_elmo.conversion.efml_reference` (the original computation in
float64, from the original files and ids) on sentences made of the model's own vocabulary, unknown words and characters,
and a word longer than the character slots: every layer must agree within ``atol`` (1e-5), with the converted model run
in float64 too, so only a conversion error can make them differ. ``elmo convert --efml FOLDER_OR_ZIP`` and ``elmo
convert --release efml-LANG`` (`modeling_elmo.conversion.efml_releases`) end here.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import random
import tempfile
from pathlib import Path

import numpy as np
import torch

from ..configuration_elmo import ElmoConfig
from ..folders.output_folder import (
    check_atol,
    check_output_dir,
    locks_output,
    write_folder_atomically,
)
from ..hub.card import CardInputs, write_model_card
from ..tokenization_elmo import SPECIAL_WORDS
from ..utils.config_checks import check_config
from ..utils.io_utils import sha256_of_file
from .efml_format import CHAR_SYMBOLS, WORD_SYMBOLS, EfmlModel, read_efml_model, safe_extract_zip
from .efml_reference import efml_forward

logger = logging.getLogger(__name__)

#: The largest difference to the float64 reference that a conversion accepts, on every layer.
EFML_ATOL = 1e-5


# --------------------------------------------------------------------------------------------------- layout
def _vocabulary(dictionary, symbols: tuple[str, ...], table_rows: int, what: str) -> tuple[list[str], list[int]]:
    """The listed entries (not the symbols) of a ``.dic`` in id order, and their original ids; checked against the
    table size."""
    if dictionary.lines != table_rows:
        raise ValueError(
            f"{dictionary.path.name} has {dictionary.lines:,} entries but the {what} table of the "
            f"weights has {table_rows:,} rows: they do not belong together."
        )
    missing = [s for s in symbols if s not in dictionary.ids]
    if missing:
        raise ValueError(f"{dictionary.path.name} lacks the symbol(s) {', '.join(missing)}.")
    listed = sorted((index, token) for token, index in dictionary.ids.items() if token not in symbols)
    return [token for _, token in listed], [index for index, _ in listed]


def efml_config(efml: EfmlModel) -> ElmoConfig:
    """The `ElmoConfig` of an EFML model: sizes from the tensor shapes, activation, clips and characters per token
    from the architecture json. Missing or unexpected tensors, or shapes that do not fit together, are a
    `ValueError` naming them."""
    te, en, arch = efml.token_embedder, efml.encoder, efml.architecture
    embedder, lstm = arch.get("token_embedder", {}), arch.get("encoder", {})
    if str(embedder.get("name", "cnn")).lower() != "cnn" or str(lstm.get("name", "elmo")).lower() != "elmo":
        raise ValueError(
            f"only the character-CNN + ELMo-encoder models convert; the architecture "
            f"({efml.architecture_source}) has token_embedder {embedder.get('name')!r}, encoder {lstm.get('name')!r}."
        )
    if "char_emb_layer.embedding.weight" not in te:
        raise ValueError(
            "token_embedder.pkl has no character table (char_emb_layer.embedding.weight): word-only "
            "models are not supported."
        )
    num_chars, char_dim = te["char_emb_layer.embedding.weight"].shape
    filters = []
    while f"convolutions.{len(filters)}.weight" in te:
        count, in_dim, width = te[f"convolutions.{len(filters)}.weight"].shape
        if in_dim != char_dim:
            raise ValueError(
                f"convolutions.{len(filters)}.weight has {in_dim} input channels, the character table {char_dim}."
            )
        filters.append([int(width), int(count)])
    highways = 0
    while f"highways._layers.{highways}.weight" in te:
        highways += 1
    total = sum(n for _, n in filters)
    word_vocab, word_dim = (
        te["word_emb_layer.embedding.weight"].shape if "word_emb_layer.embedding.weight" in te else (0, 0)
    )
    projection = te.get("projection.weight")
    if projection is None or not filters:
        raise ValueError(
            "token_embedder.pkl lacks " + ("projection.weight." if projection is None else "convolutions.")
        )
    hidden, width_in = projection.shape
    if width_in != word_dim + total:
        raise ValueError(
            f"projection.weight takes {width_in} inputs, but the word vectors ({word_dim}) and the "
            f"{total} filters make {word_dim + total}."
        )
    layers = 0
    while f"forward_layer_{layers}.input_linearity.weight" in en:
        layers += 1
    if not layers:
        raise ValueError("encoder.pkl has no forward_layer_0: it is not an ELMo encoder.")
    cell = en["forward_layer_0.input_linearity.weight"].shape[0] // 4
    expected = _expected_shapes(
        int(num_chars), int(char_dim), filters, highways, int(word_vocab), int(word_dim), int(hidden), int(cell), layers
    )
    problems = []
    for name, tensors in (("token_embedder.pkl", te), ("encoder.pkl", en)):
        want = expected[name]
        problems += [f"{name}: {key} missing" for key in sorted(set(want) - set(tensors))]
        problems += [f"{name}: unexpected {key}" for key in sorted(set(tensors) - set(want))]
        problems += [
            f"{name}: {key} has shape {tuple(tensors[key].shape)}, expected {want[key]}"
            for key in sorted(set(want) & set(tensors))
            if tuple(tensors[key].shape) != want[key]
        ]
    if problems:
        raise ValueError(
            "the weights do not form an ELMoForManyLangs model: "
            + "; ".join(problems[:8])
            + (f" (and {len(problems) - 8} more)" if len(problems) > 8 else "")
        )
    characters, _ = _vocabulary(efml.chars, CHAR_SYMBOLS, int(num_chars), "character")
    words = []
    if word_vocab:
        if efml.words is None:
            raise ValueError("the model has a word embedding but its folder has no word.dic.")
        words = _input_words(efml)[0]
    clip = lambda value: float(value) if value else None  # noqa: E731  (0 or absent: no clipping, as the original)
    config = ElmoConfig(
        vocab_size=4,
        projection_dim=int(hidden),
        cell_size=int(cell),
        num_hidden_layers=layers,
        cell_clip=clip(lstm.get("cell_clip")),
        proj_clip=clip(lstm.get("proj_clip")),
        use_skip_connections=True,
        char_embedding_dim=int(char_dim),
        char_cnn_filters=filters,
        num_highway_layers=highways,
        char_cnn_activation=str(embedder.get("activation", "relu")),
        max_characters_per_token=int(embedder.get("max_characters_per_token", 50)),
        char_vocabulary="unicode",
        num_characters=7 + len(characters),
        word_input_vocab_size=(len(SPECIAL_WORDS) + len(words)) if word_vocab else 0,
        word_input_dim=int(word_dim),
    )
    check_config(config, "the ELMoForManyLangs config")
    return config


def _expected_shapes(num_chars, char_dim, filters, highways, word_vocab, word_dim, hidden, cell, layers):
    total = sum(n for _, n in filters)
    te: dict[str, tuple[int, ...]] = {
        "char_emb_layer.embedding.weight": (num_chars, char_dim),
        "projection.weight": (hidden, word_dim + total),
        "projection.bias": (hidden,),
    }
    if word_vocab:
        te["word_emb_layer.embedding.weight"] = (word_vocab, word_dim)
    for i, (width, count) in enumerate(filters):
        te[f"convolutions.{i}.weight"], te[f"convolutions.{i}.bias"] = (count, char_dim, width), (count,)
    for k in range(highways):
        te[f"highways._layers.{k}.weight"], te[f"highways._layers.{k}.bias"] = (2 * total, total), (2 * total,)
    en: dict[str, tuple[int, ...]] = {}
    for direction in ("forward", "backward"):
        for layer in range(layers):
            prefix = f"{direction}_layer_{layer}"
            en[f"{prefix}.input_linearity.weight"] = (4 * cell, hidden)
            en[f"{prefix}.state_linearity.weight"] = (4 * cell, hidden)
            en[f"{prefix}.state_linearity.bias"] = (4 * cell,)
            en[f"{prefix}.state_projection.weight"] = (hidden, cell)
    return {"token_embedder.pkl": te, "encoder.pkl": en}


def _input_words(efml: EfmlModel) -> tuple[list[str], list[int]]:
    """The corpus words of ``word.dic`` (id order) and their original ids; a word spelt like one of this package's
    special words (``<S>``...) is left out (it would be read as that word)."""
    rows = efml.token_embedder["word_emb_layer.embedding.weight"].shape[0]
    words, ids = _vocabulary(efml.words, WORD_SYMBOLS, rows, "word")
    kept = [(w, i) for w, i in zip(words, ids, strict=False) if w not in SPECIAL_WORDS]
    if len(kept) != len(words):
        logger.warning(
            "word.dic lists %s; those words are read as the special words of the same name",
            sorted(set(words) & set(SPECIAL_WORDS)),
        )
    return [w for w, _ in kept], [i for _, i in kept]


def efml_state_dict(efml: EfmlModel, config: ElmoConfig) -> dict[str, torch.Tensor]:
    """The `ElmoModel` parameters of an EFML model, in the layout of the table above (float32)."""
    te, en = efml.token_embedder, efml.encoder
    chars = efml.chars.ids
    _, char_rows = _vocabulary(efml.chars, CHAR_SYMBOLS, te["char_emb_layer.embedding.weight"].shape[0], "character")
    table = te["char_emb_layer.embedding.weight"].double()
    order = [chars["<pad>"], chars["<eow>"], chars["<bow>"], chars["<bos>"], chars["<eos>"], chars["<oov>"]] + char_rows
    sd: dict[str, torch.Tensor] = {
        "char_encoder.char_embeddings.weight": torch.cat([table.new_zeros(1, table.shape[1]), table[order]]),
        "char_encoder.projection.weight": te["projection.weight"],
        "char_encoder.projection.bias": te["projection.bias"],
    }
    if config.word_input_vocab_size:
        words = efml.words.ids
        _, word_rows = _input_words(efml)
        word_order = [words["<pad>"], words["<bos>"], words["<eos>"], words["<oov>"]] + word_rows
        sd["char_encoder.word_embeddings.weight"] = te["word_emb_layer.embedding.weight"][word_order]
    for i in range(len(config.char_cnn_filters)):
        sd[f"char_encoder.convolutions.{i}.weight"] = te[f"convolutions.{i}.weight"]
        sd[f"char_encoder.convolutions.{i}.bias"] = te[f"convolutions.{i}.bias"]
    size = config.num_char_cnn_filters
    for k in range(config.num_highway_layers):
        weight, bias = te[f"highways._layers.{k}.weight"], te[f"highways._layers.{k}.bias"]
        sd[f"char_encoder.highways.{k}.transform.weight"], sd[f"char_encoder.highways.{k}.transform.bias"] = (
            weight[:size],
            bias[:size],
        )
        sd[f"char_encoder.highways.{k}.gate.weight"], sd[f"char_encoder.highways.{k}.gate.bias"] = (
            -weight[size:],
            -bias[size:],
        )
    for direction in ("forward", "backward"):
        for layer in range(config.num_hidden_layers):
            source, target = f"{direction}_layer_{layer}", f"encoder.{direction}_layers.{layer}"
            sd[f"{target}.input_transform.weight"] = en[f"{source}.input_linearity.weight"]
            sd[f"{target}.recurrent_transform.weight"] = en[f"{source}.state_linearity.weight"]
            sd[f"{target}.input_transform.bias"] = en[f"{source}.state_linearity.bias"]
            sd[f"{target}.projection.weight"] = en[f"{source}.state_projection.weight"]
    return {name: tensor.detach().to(torch.float32).contiguous() for name, tensor in sd.items()}


def efml_tokenizer(efml: EfmlModel, config: ElmoConfig):
    """The `ElmoTokenizer` of the converted model: whitespace-split words, the Unicode character vocabulary and, if
    the model has one, the word-input vocabulary."""
    from ..tokenization_elmo import ElmoTokenizer

    characters, _ = _vocabulary(efml.chars, CHAR_SYMBOLS, efml.chars.lines, "character")
    words = _input_words(efml)[0] if config.word_input_vocab_size else None
    return ElmoTokenizer(
        characters=characters,
        input_words=words,
        split_pattern="whitespace",
        max_characters_per_token=config.max_characters_per_token,
    )


# --------------------------------------------------------------------------------------------------- validation
def validation_sentences(efml: EfmlModel, count: int = 6, seed: int = 0) -> list[list[str]]:
    """Sentences for the parity check, made of the model's vocabulary: known words, words spelt from its characters
    (multi-byte and combining ones included), an unknown character, and a word longer than the character slots."""
    rng = random.Random(seed)
    characters = [c for c in efml.chars.ids if c not in CHAR_SYMBOLS]
    words = [w for w in (efml.words.ids if efml.words is not None else {}) if w not in WORD_SYMBOLS]
    limit = int(efml.architecture.get("token_embedder", {}).get("max_characters_per_token", 50))

    def spelt(length: int) -> str:
        return "".join(rng.choice(characters) for _ in range(length)) if characters else "x" * length

    sentences = []
    for index in range(count):
        sentence = []
        for _ in range(1 + (index * 3) % 7):
            sentence.append(rng.choice(words) if words and rng.random() < 0.6 else spelt(rng.randint(1, 6)))
        sentences.append(sentence)
    sentences[0].append(spelt(limit + 5))  # cut to the slots
    sentences[-1].append("\U0001d54f\u0378")  # characters no vocabulary lists (an unassigned code point)
    return sentences


def validate_efml_conversion(
    model, tokenizer, efml: EfmlModel, sentences: list[list[str]], atol: float = EFML_ATOL
) -> list[float]:
    """Run ``sentences`` through the converted model (a float64 copy, as one padded batch) and through the float64
    reference; return the largest difference per layer. A layer differing by more than ``atol`` is a `ValueError`."""
    reference = [
        efml_forward(
            s,
            efml.chars.ids,
            efml.words.ids if efml.words is not None else None,
            efml.token_embedder,
            efml.encoder,
            efml.architecture,
        )
        for s in sentences
    ]
    double = copy.deepcopy(model).double().eval()
    encoding = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        layers = double(**encoding, output_hidden_states=True).hidden_states
    differences = []
    for index in range(len(layers)):  # np.max keeps a NaN (max(0.0, nan) would be 0.0): NaN never passes
        differences.append(
            float(
                np.max(
                    [
                        np.abs(layers[index][row, : expected.shape[1]].numpy() - expected[index]).max()
                        for row, expected in enumerate(reference)
                    ]
                )
            )
        )
    bad = [i for i, d in enumerate(differences) if not d <= atol]
    if bad:
        raise ValueError(
            f"the converted model differs from the original computation: layer {bad[0]} by "
            f"{differences[bad[0]]:.3g} (tolerance {atol:g}; per layer {[f'{d:.2g}' for d in differences]})."
        )
    return differences


# --------------------------------------------------------------------------------------------------- conversion
def _language_name(language: str | None) -> str | None:
    """The name of a language code of the release table (``de`` -> German); other values as given."""
    from .efml_releases import EFML_RELEASES

    return next((r.language for r in EFML_RELEASES.values() if r.code == language), language)


@locks_output
def convert_efml(
    source: str | os.PathLike,
    output_dir: str | os.PathLike,
    overwrite: bool = False,
    atol: float = EFML_ATOL,
    *,
    architecture: str | os.PathLike | None = None,
    language: str | None = None,
    repository_id: int | None = None,
    sources: dict[str, str] | None = None,
    read_from: str | os.PathLike | None = None,
) -> Path:
    """Convert the ELMoForManyLangs model in ``source`` (a folder, or a zip unpacked with `safe_extract_zip` into a
    temporary folder), check it against the float64 reference, and write ``output_dir`` atomically (safetensors,
    tokenizer with its vocabularies, code files, model card, ``conversion_metadata.json``). Returns the folder.
    ``architecture`` overrides the architecture json; ``language`` is the model's language code (``de``; a code of
    the release table gets its name in the card). ``read_from`` is a path to read the zip ``source`` through
    instead (`OpenedFile.reading_path`: a cached zip held open since it was checked); ``source`` still names it.
    Raises `ValueError` naming the problem; nothing is written then."""
    from .. import ElmoModel, save_model_folder

    check_atol(atol)
    output_dir = check_output_dir(output_dir, overwrite, inputs=(source, architecture) if architecture else (source,))
    source = Path(source)
    reading = Path(read_from) if read_from is not None else source
    if not reading.exists():
        raise ValueError(f"{str(source)!r} does not exist.")
    zipped = reading.is_file()
    with tempfile.TemporaryDirectory(prefix="elmo-efml-") as unpacked:
        folder = safe_extract_zip(reading, Path(unpacked) / "model", shown_as=source) if zipped else source
        efml = read_efml_model(folder, architecture, shown_as=str(source) if zipped else None)
        config = efml_config(efml)
        model = ElmoModel(config)
        try:
            model.load_state_dict(efml_state_dict(efml, config), strict=True)
        except RuntimeError as error:  # a layout this converter did not foresee
            raise ValueError(
                f"the converted weights do not fit the model: {' '.join(str(error).split())[:400]}"
            ) from None
        model.eval()
        tokenizer = efml_tokenizer(efml, config)
        differences = validate_efml_conversion(model, tokenizer, efml, validation_sentences(efml), atol)
        inside = f"in {source.name}" if zipped else "local folder"
        files = [
            {"name": p.name, "origin": inside, "bytes": p.stat().st_size, "sha256": sha256_of_file(p)}
            for p in sorted(efml.folder.iterdir())
            if p.is_file()
        ]
        if zipped:
            archive = {"name": source.name, "origin": (sources or {}).get("zip", "local file")}
            files.insert(0, {**archive, "bytes": reading.stat().st_size, "sha256": sha256_of_file(reading)})
    name = _language_name(language)
    metadata = {
        "converted_from": "ELMoForManyLangs model" + (f" ({name})" if name else ""),
        "source_format": "elmoformanylangs",
        "language": language,
        "language_name": name,
        "license": "unknown",
        "nlpl_repository_id": repository_id,
        "architecture": efml.architecture_source,
        "training_config": efml.training_config,
        "meta": efml.meta,
        "files": files,
        "validation_max_abs_difference_per_layer": differences,
        "validation_max_abs_difference": max(differences),
        "validation_atol": atol,
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }
    if sources:
        metadata["sources"] = dict(sources)

    def fill(staging: Path) -> None:
        save_model_folder(model, tokenizer, staging)
        card = CardInputs(metadata=metadata, converted=True)
        write_model_card(staging, config, card, name=output_dir.name, num_parameters=metadata["num_parameters"])
        (staging / "conversion_metadata.json").write_text(
            json.dumps(metadata, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )

    return write_folder_atomically(output_dir, fill, overwrite=overwrite)


@locks_output
def convert_efml_release(
    release,
    output_dir: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    base_url: str | None = None,
    mirror: str | None = None,
    overwrite: bool = False,
    force_download: bool = False,
    atol: float = EFML_ATOL,
    progress: bool = True,
    attempts: int | None = None,
    retry_wait: float = 1.0,
) -> Path:
    """Fetch one of the 44 published models (`modeling_elmo.conversion.efml_releases.fetch_efml_release`: cache,
    resumable download, size checks, Hub mirror) and `convert_efml` it with its language and repository id in the card.
    The
    output location is checked before anything is downloaded."""
    from .download import DEFAULT_ATTEMPTS
    from .efml_releases import fetch_efml_release, get_efml_release

    release = get_efml_release(release) if isinstance(release, str) else release
    check_atol(atol)
    check_output_dir(output_dir, overwrite, inputs=(cache_dir,) if cache_dir else ())
    archive, where = fetch_efml_release(
        release,
        cache_dir,
        base_url=base_url,
        mirror=mirror,
        force_download=force_download,
        attempts=attempts or DEFAULT_ATTEMPTS,
        retry_wait=retry_wait,
        progress=progress,
        keep_open=True,  # read the zip checked under the cache's lock, whatever the cache's path leads to later
    )
    with archive:
        return convert_efml(
            archive.path,
            output_dir,
            overwrite=overwrite,
            atol=atol,
            language=release.code,
            repository_id=release.repository_id,
            sources={"zip": where},
            read_from=archive.reading_path,
        )


__all__ = [
    "EFML_ATOL",
    "convert_efml",
    "convert_efml_release",
    "efml_config",
    "efml_state_dict",
    "efml_tokenizer",
    "validate_efml_conversion",
    "validation_sentences",
]
