"""Running a trained ELMo biLM: a strict loader, and an embedder that returns every layer as numpy arrays.

`load_elmo_model` loads the biLM of a saved folder or Hub id and refuses anything but an exact match between the
weights and ``config.json``: transformers would otherwise initialise the missing tensors at random, print a table,
and let the caller compute vectors from a partly random model. `ElmoEmbedder` runs the model on batches of word
lists. Both the ``elmo embed`` command (`modeling_elmo.embedding.embed`) and
`modeling_elmo.embedding.features.add_elmo_features` use them.

```python
>>> embedder = ElmoEmbedder.from_pretrained("path/or/hub-id")                        # doctest: +SKIP
>>> layers = embedder.embed_sentences([["The", "cat", "sat"], ["Hi"]])              # doctest: +SKIP
>>> layers[0].shape                                                                   # doctest: +SKIP
(3, 3, 1024)
```
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..modeling_elmo import validated_inputs
from ..utils.capability import require_bf16
from ..utils.io_utils import error_line

logger = logging.getLogger(__name__)

#: Compute dtypes of `ElmoEmbedder` (outputs are float32 whatever the compute dtype).
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Weights that a task head or the language model saves beside the biLM; they are not part of `ElmoModel`.
HEAD_WEIGHT_PREFIXES = ("softmax.", "classifier.", "scalar_mix.")
#: Arguments of ``from_pretrained`` that say where to find a Hub model (passed to the config and tokenizer too).
HUB_KWARGS = ("revision", "cache_dir", "token", "local_files_only", "force_download")
#: The numbers of token vectors an `ElmoEmbedder` keeps for the words it has seen (2**24: 64 MB in float32, 32,768
#: words of the original model): the character encoder runs once per distinct word, not once per batch.
WORD_CACHE_NUMBERS = 2**24


# ---------------------------------------------------------------------------------------------------- loading


def check_device(device: torch.device | str, what: str) -> torch.device:
    """``device`` as a `torch.device`; a one-line `ValueError` naming ``what`` and the device unless torch can put a
    tensor there (``"cuda:7"`` on a machine without it raised a bare ``AssertionError`` from deep inside torch)."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"{what}: device {str(device)!r} is not a device torch knows ({error}).") from None
    if device.type in ("cpu", "meta"):
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{what}: device {str(device)!r} asked for a GPU, but torch sees none.")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"{what}: device {str(device)!r} does not exist: torch sees {count} GPU(s), cuda:0 to cuda:{count - 1}."
            )
    try:
        torch.empty(0, device=device)
    except (AssertionError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{what}: device {str(device)!r} is not usable here ({reason}).") from None
    return device


def check_compute_dtype(device: torch.device | str, dtype: torch.dtype, what: str) -> None:
    """One-line `ValueError` naming ``what`` unless the model may run in ``dtype`` on ``device``: float32 anywhere;
    bfloat16 where the device multiplies it natively (`capability.require_bf16`: a GPU, or a CPU with AVX512-BF16, AMX
    or Arm BF16); float16 off the CPU."""
    device = torch.device(device)
    if dtype not in DTYPES.values():
        raise ValueError(f"{what}: dtype must be one of {sorted(DTYPES)}, got {dtype!r}.")
    if dtype == torch.bfloat16 and device.type in ("cpu", "cuda"):
        require_bf16(device, what)
    elif dtype == torch.float16 and device.type == "cpu":
        raise ValueError(f"{what}: float16 needs a GPU; on the CPU use float32 (or bfloat16 where the CPU has it).")


@contextlib.contextmanager
def quiet_load_report() -> Iterator[None]:
    """Drop transformers' LOAD REPORT table: `load_elmo_model` raises its own error for what the table shows.

    A filter, not a logger level: transformers runs extra checks (and warns) when that logger has a level set.
    """
    report_logger = logging.getLogger("transformers.modeling_utils")

    def not_the_report(record: logging.LogRecord) -> bool:
        return record.funcName != "log_state_dict_report"

    report_logger.addFilter(not_the_report)
    try:
        yield
    finally:
        report_logger.removeFilter(not_the_report)


def _hub_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in HUB_KWARGS if k in kwargs}


def _check_location(location: str, hub_kwargs: dict[str, Any]) -> None:
    """Raise `ValueError` unless ``location`` is a folder or Hub id whose ``config.json`` describes an ELMo model.
    A path that looks local and does not exist, or a Hub id that cannot be reached, fails at once
    (`modeling_elmo.utils.loading.check_model_location`)."""
    from transformers import PretrainedConfig

    from ..configuration_elmo import ElmoConfig
    from ..utils.io_utils import check_json_files
    from ..utils.loading import check_model_location

    if check_model_location(location):
        if not os.path.isdir(location):
            raise ValueError(
                f"model {location!r} is a file; give the folder that holds config.json and model.safetensors."
            )
        if not os.path.isfile(os.path.join(location, "config.json")):
            raise ValueError(f"{location!r} is not an ELMo model folder: it has no config.json.")
        check_json_files(location)
    try:
        config, _ = PretrainedConfig.get_config_dict(location, **hub_kwargs)
    except (OSError, ValueError) as error:
        where = "the folder" if os.path.isdir(location) else "no such folder here, and the Hub"
        raise ValueError(f"cannot read the config of model {location!r} ({where}): {error_line(error)}") from None
    model_type = config.get("model_type")
    if model_type != ElmoConfig.model_type:
        raise ValueError(
            f"{location!r} is not an ELMo model: its config.json has model_type {model_type!r}, "
            f"not {ElmoConfig.model_type!r}."
        )


#: What an ELMo model takes from its tokenizer's output: the character ids, the mask and, for a model with a
#: word-embedding input, the word ids.
MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "word_input_ids")


def model_inputs(encoding: Any, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """The entries of a tokenizer's output an ELMo model takes (`MODEL_INPUT_KEYS`), on ``device``."""
    return {
        key: (encoding[key].to(device) if device is not None else encoding[key])
        for key in MODEL_INPUT_KEYS
        if key in encoding
    }


def load_elmo_model(model_name_or_path: str | os.PathLike, **kwargs: Any) -> torch.nn.Module:
    """Load the `ElmoModel` (the biLM) of a saved folder or Hub id for inference, refusing any mismatch.

    The folder may hold an `ElmoModel`, a task head or an `ElmoForBidirectionalLM`: the weights those add beside
    the biLM (`HEAD_WEIGHT_PREFIXES`: ``softmax.*``, ``classifier.*``, ``scalar_mix.*``) are not loaded. Weights
    are read from safetensors files only (a folder holding only ``pytorch_model.bin`` is refused: loading a pickle
    can run code).

    Args:
        model_name_or_path: a local folder or a Hub id (``namespace/name``).
        kwargs: passed to ``from_pretrained`` (e.g. ``revision``, ``cache_dir``, ``token``).

    Returns:
        the `ElmoModel`, in eval mode.

    Raises:
        ValueError: the location is neither a folder nor a valid Hub id; it is not an ELMo model (no
            ``config.json``, another ``model_type``); it has no safetensors weights; or a biLM weight is missing, has
            another shape than ``config.json`` implies, or a tensor that belongs to no ELMo model is present. The
            message names the tensors.
    """
    from ..modeling_elmo import ElmoModel
    from ..utils.config_checks import load_config
    from ..utils.loading import refuse_pickled_weights
    from ..utils.weight_checks import check_loading_info, check_weights_fit_config, refuse_nonfinite_weights

    for reserved in ("output_loading_info", "ignore_mismatched_sizes", "use_safetensors"):
        if reserved in kwargs:
            raise ValueError(f"load_elmo_model sets {reserved} itself; do not pass it.")
    location = os.fspath(model_name_or_path)
    if "device_map" not in kwargs and isinstance(kwargs.get("dtype"), torch.dtype):  # loaded on the CPU
        check_compute_dtype("cpu", kwargs["dtype"], f"load_elmo_model({location!r}, dtype={kwargs['dtype']})")
    _check_location(location, _hub_kwargs(kwargs))
    if os.path.isdir(location):
        refuse_pickled_weights(location)
    try:  # checked (sizes bounded) before the weights' shapes are laid out
        config = load_config(location, f"the config.json of model {location!r}", **_hub_kwargs(kwargs))
    except OSError as error:
        raise ValueError(f"cannot read the config of model {location!r}: {error_line(error)}") from None
    if os.path.isdir(location):
        check_weights_fit_config(location, ElmoModel, config, ignore_unexpected=HEAD_WEIGHT_PREFIXES)
    try:
        with quiet_load_report():
            # ignore_mismatched_sizes: report wrong shapes in loading_info (checked below) instead of a RuntimeError
            # that points at the table.
            model, info = ElmoModel.from_pretrained(
                location,
                config=config,
                output_loading_info=True,
                use_safetensors=True,
                ignore_mismatched_sizes=True,
                **kwargs,
            )
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load the weights of model {location!r}: {error_line(error)}") from None
    except Exception as error:  # safetensors' SafetensorError (a damaged file on the Hub), torch's size errors
        raise ValueError(f"cannot load the weights of model {location!r}: {error_line(error, named=True)}") from None
    check_loading_info(location, info, ignore_unexpected=HEAD_WEIGHT_PREFIXES)
    refuse_nonfinite_weights(model, location)
    return model.eval()  # its fast recurrence as config.use_packed_kernels says (docs/model.md)


def weights_fingerprint(model: torch.nn.Module) -> str:
    """The sha256 of a model's state (names, dtypes, shapes and values, as the model holds them)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        if tensor.numel():  # the bytes hashed in place (a copy through tobytes took as long again)
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def load_elmo_tokenizer(model_name_or_path: str | os.PathLike, words: bool = True, **kwargs: Any) -> Any:
    """Load the `ElmoTokenizer` of an ELMo model folder or Hub id, with the checks and one-line errors of
    `load_elmo_model` (``kwargs``: ``revision``, ``cache_dir``, ``token``, ...).

    ``words=False``: without the word vocabulary (``vocab.txt`` is not read; only the special words have ids), for
    work that needs only the character ids and the word input, such as embedding: a vocabulary of millions of words
    costs gigabytes of memory."""
    import tempfile

    from ..tokenization_elmo import ElmoTokenizer

    location = os.fspath(model_name_or_path)
    _check_location(location, _hub_kwargs(kwargs))
    try:
        if words:
            return ElmoTokenizer.from_pretrained(location, **kwargs)
        with (
            tempfile.TemporaryDirectory() as folder
        ):  # a caller's vocab_file is the one path that replaces the folder's
            empty = os.path.join(folder, "vocab.txt")
            open(empty, "w").close()
            return ElmoTokenizer.from_pretrained(location, vocab_file=empty, **kwargs)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load the tokenizer of model {location!r}: {error_line(error)}") from None


# ---------------------------------------------------------------------------------------------------- batching


def make_batches(lengths: Sequence[int], batch_size: int, max_batch_tokens: int | None = None) -> list[list[int]]:
    """Positions of non-empty sentences grouped into batches, longest first.

    A batch holds at most ``batch_size`` sentences and, if ``max_batch_tokens`` is given, at most that many padded
    tokens (a single longer sentence still gets a batch of its own).
    """
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            fits_tokens = max_batch_tokens is None or (len(batch) + 1) * lengths[batch[0]] <= max_batch_tokens
            if len(batch) < batch_size and fits_tokens:
                batch.append(i)
                continue
        batches.append([i])
    return batches


# ---------------------------------------------------------------------------------------------------- embedder


class ElmoEmbedder:
    """Runs an `ElmoModel` on batches of word lists and returns per-sentence numpy arrays of all layers.

    The model runs under `torch.inference_mode()` and stateless, so a sentence's vectors depend on nothing but the
    sentence (not on its batch or its neighbours).

    Args:
        model: an `ElmoModel` (or a model with an ``elmo`` attribute holding one, e.g. a task head). It is moved to
            ``device`` and ``dtype`` and put in eval mode.
        tokenizer: the matching `ElmoTokenizer`.
        device: where to run; defaults to the model's device.
        dtype: `torch.float32` (default); `torch.bfloat16` where ``device`` multiplies it natively (a GPU, or a CPU
            with AVX512-BF16, AMX or Arm BF16: `check_compute_dtype`); `torch.float16` on a GPU. Outputs are float32.
            In bfloat16 the products run in bfloat16, the LSTM's state, cell and gate sums in float32.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        base = getattr(model, "elmo", model)
        device = check_device(device, "ElmoEmbedder") if device is not None else next(base.parameters()).device
        check_compute_dtype(device, dtype, "ElmoEmbedder")
        model_width = int(base.config.max_characters_per_token)
        tokenizer_width = getattr(tokenizer, "max_characters_per_token", model_width)
        if tokenizer_width != model_width:
            raise ValueError(
                f"the tokenizer writes {tokenizer_width} characters per word "
                f"(max_characters_per_token in tokenizer_config.json) but the model reads "
                f"{model_width} (config.json); the two files belong to different models."
            )
        self.model = base.to(device=device, dtype=dtype).eval()  # the recurrence config.use_packed_kernels says
        self.tokenizer = tokenizer
        self.device = device
        self.num_layers = int(base.config.num_representation_layers)  # L + 1
        self.output_size = int(base.config.hidden_size)  # 2P
        #: Token vectors of words seen before, by their character ids (`token_vectors`); at most
        #: ``max_cached_words`` (0 for a model with a word-embedding input: its vectors come from the model's forward).
        self.word_vectors: dict[bytes, torch.Tensor] = {}
        self.max_cached_words = (
            0 if base.config.word_input_vocab_size else WORD_CACHE_NUMBERS // base.config.projection_dim
        )

    @functools.cached_property
    def weights_fingerprint(self) -> str:
        """The sha256 of the weights the model runs with (`weights_fingerprint`; its dtype included): recorded by
        ``elmo embed`` so that a resumed run refuses a model whose weights changed."""
        return weights_fingerprint(self.model)

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str | os.PathLike,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        words: bool = True,
        **kwargs: Any,
    ) -> ElmoEmbedder:
        """Load the biLM with `load_elmo_model` (strict) and the tokenizer from a folder or Hub id.

        ``kwargs`` go to `load_elmo_model`; those of `HUB_KWARGS` (``revision``, ``token``, ...) also to the tokenizer.
        ``words=False`` loads the tokenizer without its word vocabulary (`load_elmo_tokenizer`): the vectors are the
        same, as the biLM reads characters (and its word input has its own list).
        """
        model = load_elmo_model(model_name_or_path, **kwargs)
        tokenizer = load_elmo_tokenizer(model_name_or_path, words=words, **_hub_kwargs(kwargs))
        return cls(model, tokenizer, device=device, dtype=dtype)

    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """All layers of each sentence of one batch: float32 arrays ``(num_layers, len(sentence), output_size)``.

        Every sentence must have at least one word (`embed_sentences` accepts empty ones). Non-finite vectors (a
        model with corrupt weights) raise `FloatingPointError` instead of being returned.
        """
        _check_word_lists(sentences)
        if any(len(s) == 0 for s in sentences):
            raise ValueError("embed_batch got an empty sentence; use embed_sentences for lists that may hold some.")
        encoded = self.tokenizer(
            [list(s) for s in sentences], is_split_into_words=True, padding=True, return_tensors="pt"
        )
        inputs = model_inputs(encoded, self.device)
        with torch.inference_mode():
            if self.max_cached_words:  # the same numbers, each distinct word through the character encoder once
                embeds = self.token_vectors(encoded["input_ids"], encoded["attention_mask"])
                inputs = {"inputs_embeds": embeds, "attention_mask": inputs["attention_mask"]}
            out = self.model(**inputs, output_hidden_states=True, return_dict=True)
            layers = torch.stack(tuple(out.hidden_states), dim=1).float().cpu().numpy()  # (B, L+1, T, 2P)
        # checked here, where the vectors have left the device anyway (the model's forward makes the host wait for
        # no check): every export and cache of vectors (`elmo embed`, `add_elmo_features`) goes through this
        if not np.isfinite(layers).all():
            raise FloatingPointError(
                "the ELMo model produced NaN or infinite vectors: its weights are probably corrupt."
            )
        return [layers[i, :, : len(s)] for i, s in enumerate(sentences)]

    def token_vectors(self, char_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The token vectors (B, T, P) of a batch (character ids (B, T, C) and mask (B, T) from the tokenizer, on the
        CPU), as the model's character encoder computes them: kept ones for words seen before (`word_vectors`), the
        others encoded now, once per distinct word, and kept while fewer than ``max_cached_words`` are."""
        config = self.model.config
        char_ids, mask = validated_inputs(
            char_ids, attention_mask, int(config.max_characters_per_token), int(config.num_characters) - 1
        )
        rows = char_ids[mask]
        keys = [row.tobytes() for row in rows.numpy()]
        first_seen: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if key not in self.word_vectors:
                first_seen.setdefault(key, i)
        new: dict[bytes, torch.Tensor] = {}
        if first_seen:
            vectors = self.model.char_encoder(rows[list(first_seen.values())].to(self.device))
            new = dict(zip(first_seen, vectors, strict=True))
            room = max(0, self.max_cached_words - len(self.word_vectors))
            self.word_vectors.update(itertools.islice(new.items(), room))
        flat = torch.stack([self.word_vectors[key] if key in self.word_vectors else new[key] for key in keys])
        embeds = flat.new_zeros(*mask.shape, flat.shape[-1])
        embeds[mask.to(flat.device)] = flat
        return embeds

    def embed_sentences(
        self,
        sentences: Iterable[Sequence[str]],
        batch_size: int = 64,
        max_batch_tokens: int | None = None,
        show_progress: bool = True,
    ) -> list[np.ndarray]:
        """All layers of every sentence, in the given order: float32 arrays ``(num_layers, len(sentence),
        output_size)``; an empty sentence gives ``(num_layers, 0, output_size)``.

        The sentences are sorted by length and batched (`make_batches`), which saves padding. A progress bar over the
        sentences shows when there is more than one batch, unless ``show_progress`` is false.
        """
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        if isinstance(sentences, (str, bytes, Mapping)):
            raise ValueError(
                f"sentences must be a list of word lists, got a {type(sentences).__name__} ({sentences!r:.60})."
            )
        sentences = list(sentences)
        _check_word_lists(sentences)
        sentences = [list(s) for s in sentences]
        results = [np.zeros((self.num_layers, 0, self.output_size), dtype=np.float32) for _ in sentences]
        batches = make_batches([len(s) for s in sentences], batch_size, max_batch_tokens)
        with tqdm(
            total=sum(map(len, batches)),
            unit="sent",
            desc="ELMo",
            dynamic_ncols=True,
            disable=not show_progress or len(batches) < 2,
        ) as progress:
            for batch in batches:
                for i, layers in zip(batch, self.embed_batch([sentences[i] for i in batch]), strict=False):
                    results[i] = np.ascontiguousarray(layers)  # not a view that keeps the whole batch alive
                progress.update(len(batch))
        return results


def _check_word_lists(sentences: Sequence[Any]) -> None:
    """Refuse anything but a sequence of word lists: a string (each character would become a word), a dict (its
    keys would), words that are not strings."""
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)):
            raise ValueError(
                f"sentence {i} is a {type(sentence).__name__} ({sentence!r:.60}), not a list of words; "
                "split it first (text.split(), or the tokenizer's split_words)."
            )
        if isinstance(sentence, Mapping) or not isinstance(sentence, Sequence):
            raise ValueError(
                f"sentence {i} must be a list of words, got a {type(sentence).__name__} ({sentence!r:.60})."
            )
        for j, word in enumerate(sentence):
            if not isinstance(word, str):
                raise ValueError(f"word {j} of sentence {i} must be a string, got {type(word).__name__} {word!r:.40}.")


__all__ = [
    "DTYPES",
    "check_compute_dtype",
    "HEAD_WEIGHT_PREFIXES",
    "HUB_KWARGS",
    "MODEL_INPUT_KEYS",
    "ElmoEmbedder",
    "load_elmo_model",
    "load_elmo_tokenizer",
    "make_batches",
    "model_inputs",
    "weights_fingerprint",
]
