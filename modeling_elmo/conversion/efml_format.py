"""Reading an ELMoForManyLangs model (HIT-SCIR, CoNLL 2018 shared task): its folder or zip, its vocabularies, its
weights, and the architecture they imply. No conversion happens here (`modeling_elmo.conversion.convert_efml` does
that).

A model folder (or the zip NLPL publishes) holds:

* ``char.dic`` and ``word.dic``: ``token<TAB>id`` lines. Characters are code points, then the six symbols
  ``<bos> <eos> <oov> <pad> <bow> <eow>``; words start with ``<oov> <bos> <eos> <pad>``. The original reader strips
  each line before splitting it, so the line of a whitespace character is read back as U+3000 (`read_dic` does
  the same);
* ``token_embedder.pkl`` and ``encoder.pkl``: ``state_dict()`` files of PyTorch 0.4, tensors only, in the legacy
  (pre-zip) serialisation, their storages tagged ``cuda:0``. `load_state_dict` first lists every global the pickle
  references (`pickle_references`) and refuses anything but tensors, storages and ordered dicts, then reads it
  with ``torch.load(weights_only=True)`` onto the CPU;
* ``config.json``: the training command's arguments (its ``config_path`` names the architecture json, often a path
  that exists only on the authors' machine), and from NLPL ``meta.json``.

The architecture json (`PUBLISHED_ARCHITECTURE`, the repository's ``cnn_50_100_512_4096_sample.json``) is usually
not in the zip; every size is read from the tensor shapes anyway (`read_architecture`), the architecture gives
only the activation, the clips and the characters per token.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import logging
import math
import os
import pickletools
import stat
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..folders.files import new_private_folder, remove_own_folder, replace
from ..utils.config_checks import shown
from ..utils.io_utils import error_line, read_json_object

logger = logging.getLogger(__name__)

#: ``elmoformanylangs/configs/cnn_50_100_512_4096_sample.json``: the architecture every published model was trained
#: with (only ``activation``, ``cell_clip``, ``proj_clip`` and ``max_characters_per_token`` are read from it).
PUBLISHED_ARCHITECTURE: dict[str, Any] = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
#: The six symbols of ``char.dic`` and the four of ``word.dic``.
CHAR_SYMBOLS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")
WORD_SYMBOLS = ("<oov>", "<bos>", "<eos>", "<pad>")
REQUIRED_FILES = ("char.dic", "encoder.pkl", "token_embedder.pkl")
#: The globals a state-dict pickle may reference: ordered dicts, tensor rebuild functions and typed storages.
_STORAGE_TYPES = ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
ALLOWED_PICKLE_GLOBALS = frozenset(
    {
        ("collections", "OrderedDict"),
        ("torch._utils", "_rebuild_tensor"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch", "UntypedStorage"),
    }
    | {(module, f"{kind}Storage") for module in ("torch", "torch.cuda") for kind in _STORAGE_TYPES}
)
#: An unpacked model is a few hundred MB; a zip announcing more than this is refused before anything is written.
MAX_UNPACKED_BYTES = 8 << 30
#: Weights and vocabularies deflate by a few times at most (float weights barely at all): a member that inflates to
#: more than this many times its compressed size, beyond `SMALL_MEMBER_BYTES`, is not part of a model; nor is a zip
#: whose members together do.
MAX_MEMBER_RATIO = 64
SMALL_MEMBER_BYTES = 1 << 20
#: The first bytes a weight file of the model may start with: a pickle of protocol 2 (the legacy ``torch.save``
#: format) or a zip (the current one).
PICKLE_MAGIC = (b"\x80\x02", b"PK\x03\x04")


# --------------------------------------------------------------------------------------------------- the zip
def safe_extract_zip(
    archive: str | os.PathLike, target: str | os.PathLike, *, shown_as: str | os.PathLike | None = None
) -> Path:
    """Unpack ``archive`` into the new folder ``target``; return it.

    Every member is checked before anything is written: an absolute path, a ``..`` component, a link or a device,
    or a total size above `MAX_UNPACKED_BYTES` is a `ValueError` naming the archive and the member. The members
    are unpacked into a temporary sibling that becomes ``target`` only when complete. ``shown_as`` is the archive's
    path in messages when ``archive`` is a path it is read through (a cached zip held open).
    """
    archive, target = Path(archive), Path(target)
    named = Path(shown_as) if shown_as is not None else archive
    if target.exists():
        raise ValueError(f"cannot unpack {named.name} into {str(target)!r}: it exists.")
    try:
        handle = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"{str(named)!r} is not a readable zip archive ({error}).") from None
    with handle:
        members = handle.infolist()
        total = packed = 0
        for member in members:
            name = member.filename
            parts = name.replace("\\", "/").split("/")
            if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts:
                raise ValueError(
                    f"{named.name} holds {shown(name)}, a path outside the folder it unpacks into; "
                    "nothing was unpacked."
                )
            if not _plain_member(member):
                raise ValueError(
                    f"{named.name} holds {shown(name)}, which is not a plain file or folder (a link?); "
                    "nothing was unpacked."
                )
            if member.file_size > max(SMALL_MEMBER_BYTES, MAX_MEMBER_RATIO * member.compress_size):
                raise ValueError(
                    f"{named.name} holds {shown(name)}, which inflates from {member.compress_size:,} "
                    f"to {member.file_size:,} bytes: no file of a model compresses so well (a zip bomb?); "
                    "nothing was unpacked."
                )
            total += member.file_size
            packed += member.compress_size
        # members each under the bound add up too; the archive's own size, as members may share their data
        packed = min(packed, archive.stat().st_size)
        if total > max(SMALL_MEMBER_BYTES, MAX_MEMBER_RATIO * packed):
            raise ValueError(
                f"{named.name} inflates from {packed:,} to {total:,} bytes in all: no model compresses so well "
                "(a zip bomb?); nothing was unpacked."
            )
        if total > MAX_UNPACKED_BYTES:
            raise ValueError(
                f"{named.name} unpacks to {total:,} bytes, more than a model can hold "
                f"({MAX_UNPACKED_BYTES:,}); nothing was unpacked."
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = new_private_folder(target.name, "unpacking", target.parent)
        try:
            root = staging.resolve()
            for member in members:
                destination = (staging / member.filename).resolve()
                if root not in destination.parents and destination != root:  # belt and braces after the checks
                    raise ValueError(f"{named.name} holds {member.filename!r}, a path outside the folder.")
                if member.is_dir():
                    destination.mkdir(parents=True, exist_ok=True)
                    continue
                destination.parent.mkdir(parents=True, exist_ok=True)
                _extract_member(handle, member, destination, named.name)
            replace(staging, target)
        except BaseException as error:
            remove_own_folder(staging)
            if isinstance(error, (zipfile.BadZipFile, EOFError, OSError)):
                raise ValueError(f"cannot unpack {named.name}: {error_line(error, 200)}.") from None
            raise
    return target


def _plain_member(member: zipfile.ZipInfo) -> bool:
    """Whether a zip member is a plain file or folder. Its Unix mode (the high 16 bits of ``external_attr``) may
    hold a file type, or permission bits only (``zipfile.writestr`` and many tools write no type): only a type other
    than a regular file or a folder (a link, a device, a FIFO) is refused."""
    mode = member.external_attr >> 16
    kind = stat.S_IFMT(mode)
    return kind == 0 or stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _extract_member(handle: zipfile.ZipFile, member: zipfile.ZipInfo, destination: Path, archive: str) -> None:
    """Stream one member to ``destination``: a weight file (``*.pkl``) must start like one (`PICKLE_MAGIC`), checked
    on its first block, and no member may yield more bytes than its entry declares (the bound checked above)."""
    written = 0
    with handle.open(member) as source, open(destination, "wb") as sink:
        while block := source.read(1 << 20):
            if written == 0 and member.filename.endswith(".pkl") and not block.startswith(PICKLE_MAGIC):
                raise ValueError(
                    f"{archive} holds {shown(member.filename)}, which does not start like a PyTorch "
                    f"weight file (its first bytes are {block[:8]!r}); nothing was unpacked."
                )
            written += len(block)
            if written > member.file_size:
                raise ValueError(
                    f"{archive} holds {shown(member.filename)}, which inflates beyond the "
                    f"{member.file_size:,} bytes its entry declares; nothing was unpacked."
                )
            sink.write(block)


def model_folder_of(root: str | os.PathLike, shown_as: str | None = None) -> Path:
    """The folder under ``root`` (``root`` itself or one below it, as zips often nest one) that holds the model;
    errors call ``root`` ``shown_as`` (the zip it was unpacked from) where given."""
    root = Path(root)
    if (root / "encoder.pkl").is_file():
        return root
    found = sorted(path.parent for path in root.rglob("encoder.pkl") if path.is_file())
    if len(found) != 1:
        raise ValueError(
            f"{shown_as or str(root)!r} is not an ELMoForManyLangs model: "
            + ("no encoder.pkl in it." if not found else f"{len(found)} folders hold an encoder.pkl.")
        )
    return found[0]


# --------------------------------------------------------------------------------------------------- vocabularies
@dataclasses.dataclass
class Dictionary:
    """A ``.dic`` file as the original reads it: ``ids`` maps each token to its id (a later line wins), ``lines`` is
    the number of lines."""

    path: Path
    ids: dict[str, int]
    lines: int


def read_dic(path: str | os.PathLike, symbols: tuple[str, ...] | None = None) -> Dictionary:
    """Read a ``char.dic``/``word.dic``: ``token<TAB>id`` per line; a line whose token is whitespace is U+3000 (as
    the original reader has it). A line that is not ``token<TAB>id`` (the id in ASCII digits), a repeated or
    out-of-range id, or, where ``symbols`` is given (``char.dic``: `CHAR_SYMBOLS`), a token that is neither one
    character nor one of them is a `ValueError` naming the file and the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{str(path)!r} does not exist.") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{str(path)!r} is not UTF-8 text ({error}).") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    ids: dict[str, int] = {}
    seen: set[int] = set()
    for number, line in enumerate(lines, start=1):
        fields = line.strip().split("\t")  # as the original: strip the line, then split it
        if len(fields) == 1:
            fields.insert(0, "\u3000")  # the token was whitespace, and went with the strip
        # isdigit() alone would take "²" or "٣"; more than 18 digits is no id of a vocabulary (and int() of
        # thousands of digits is refused by Python itself)
        if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit() and len(fields[1]) <= 18):
            raise ValueError(f"{path.name} line {number} is not 'token<TAB>id' (the id a number): {shown(line)}.")
        token, index = fields[0], int(fields[1])
        if symbols is not None and len(token) != 1 and token not in symbols:
            raise ValueError(
                f"{path.name} line {number} lists {shown(token)}, which is neither one character "
                f"nor one of the symbols {' '.join(symbols)}."
            )
        if index in seen:
            raise ValueError(f"{path.name} line {number} repeats the id {index}.")
        seen.add(index)
        ids[token] = index
    if seen != set(range(len(lines))):
        raise ValueError(f"{path.name}: the ids of its {len(lines)} lines are not 0 to {len(lines) - 1}.")
    return Dictionary(path=path, ids=ids, lines=len(lines))


# --------------------------------------------------------------------------------------------------- weights
def _pickle_streams(data: bytes, name: str) -> list[bytes]:
    """The pickles to inspect in a ``torch.save`` file: ``data.pkl`` of the zip format, or the five pickles at the
    start of the legacy format (magic number, protocol, system info, the object, the storage keys)."""
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return [archive.read(n) for n in archive.namelist() if n.endswith(".pkl")]
    streams, position = [], 0
    for _ in range(5):
        handle = io.BytesIO(data[position:])
        try:
            for _op in pickletools.genops(handle):
                pass
        except Exception as error:  # a damaged or foreign file
            raise ValueError(f"{name} is not a PyTorch weight file ({type(error).__name__}: {error}).") from None
        streams.append(data[position : position + handle.tell()])
        position += handle.tell()
    return streams


def pickle_references(data: bytes, name: str = "the file") -> set[tuple[str, str]]:
    """Every (module, name) global the pickles of a ``torch.save`` file reference, read without unpickling."""
    found: set[tuple[str, str]] = set()
    for stream in _pickle_streams(data, name):
        strings: list[Any] = []  # what the recent opcodes pushed (for STACK_GLOBAL's two operands)
        memo: dict[int, Any] = {}
        try:
            for opcode, argument, _ in pickletools.genops(stream):
                if opcode.name == "GLOBAL":
                    module, _, attribute = str(argument).partition(" ")
                    found.add((module, attribute))
                elif opcode.name == "STACK_GLOBAL":
                    if len(strings) < 2 or not all(isinstance(v, str) for v in strings[-2:]):
                        found.add(("?", "a global whose name is computed"))
                    else:
                        found.add((strings[-2], strings[-1]))
                elif opcode.name in (
                    "SHORT_BINUNICODE",
                    "BINUNICODE",
                    "BINUNICODE8",
                    "UNICODE",
                    "SHORT_BINSTRING",
                    "BINSTRING",
                    "STRING",
                ):
                    strings.append(argument)
                elif opcode.name in ("BINPUT", "LONG_BINPUT", "PUT"):
                    memo[int(argument)] = strings[-1] if strings else None
                elif opcode.name == "MEMOIZE":
                    memo[len(memo)] = strings[-1] if strings else None
                elif opcode.name in ("BINGET", "LONG_BINGET", "GET"):
                    strings.append(memo.get(int(argument)))
                elif opcode.name == "INST":  # protocol 0's class instantiation names its class like GLOBAL
                    module, _, attribute = str(argument).partition(" ")
                    found.add((module, attribute))
                else:
                    strings.append(None)
        except Exception as error:
            raise ValueError(f"{name} is not a PyTorch weight file ({type(error).__name__}: {error}).") from None
    return found


def load_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A ``.pkl`` state dict, read safely: refused (naming the file and the global) when its pickle references
    anything but tensors, storages and ordered dicts; then ``torch.load(weights_only=True)`` onto the CPU (storages
    tagged ``cuda:0`` included). Every value must be a tensor."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{str(path)!r} does not exist.") from None
    foreign = sorted(
        f"{module}.{attribute}"
        for module, attribute in pickle_references(data, path.name)
        if (module, attribute) not in ALLOWED_PICKLE_GLOBALS
    )
    if foreign:
        raise ValueError(
            f"{path.name} references {', '.join(foreign)}: a weight file holds only tensors and ordered "
            "dicts, so it is refused (it could run code when read)."
        )
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a damaged file
        raise ValueError(f"cannot read {path.name}: {' '.join(str(error).split())[:300]}") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ValueError(f"{path.name} does not hold a state dict (names -> tensors).")
    check_tensor_storage(state, path.name)
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            count = int((~torch.isfinite(tensor)).sum())
            raise ValueError(
                f"{path.name}: tensor {shown(name)} holds {count:,} NaN or infinite value(s); a model "
                "converted from it would compute NaN, so it is refused."
            )
    return dict(state)


def _view_problem(tensor: torch.Tensor) -> str | None:
    """What is wrong with how ``tensor`` lies in its storage, or `None`: a stride of 0 along a dimension of more
    than one element (one stored value read many times) or elements that overlap. (A view reaching beyond its
    storage is refused by torch itself when the file is read.)"""
    if tensor.numel() == 0:
        return None
    span = 1
    for stride, size in sorted(
        (stride, size) for size, stride in zip(tensor.shape, tensor.stride(), strict=False) if size > 1
    ):
        if stride == 0:
            return "is a stride-0 view (one stored value repeated)"
        if stride < span:
            return "is a view whose elements overlap"
        span = stride * size
    return None


def check_tensor_storage(state: dict[str, torch.Tensor], name: str) -> None:
    """Bound what the tensors of a loaded file declare by what the file holds, before anything is computed from
    them: every tensor is a plain view of its storage (`_view_problem`), and all of them together declare no more
    bytes than their distinct storages hold (two tensors never share bytes). A `ValueError` names the file and the
    tensor. A pickle of a few KB could otherwise declare 16384-wide layers of a 34 GB model."""
    declared, stored = 0, {}
    for key, tensor in state.items():
        problem = _view_problem(tensor)
        if problem:
            raise ValueError(
                f"{name}: tensor {shown(key)} of shape {tuple(tensor.shape)} {problem}: a weight file "
                "stores every value of every tensor, so it is refused."
            )
        declared += tensor.numel() * tensor.element_size()
        storage = tensor.untyped_storage()
        stored[storage.data_ptr(), storage.nbytes()] = storage.nbytes()
    if declared > sum(stored.values()):
        raise ValueError(
            f"{name}: its tensors declare {declared:,} bytes of values but the file stores "
            f"{sum(stored.values()):,} (tensors sharing their values); it is refused."
        )


# --------------------------------------------------------------------------------------------------- the model
@dataclasses.dataclass
class EfmlModel:
    """Everything read from an ELMoForManyLangs model folder: vocabularies, weights, architecture, metadata."""

    folder: Path
    chars: Dictionary
    words: Dictionary | None
    token_embedder: dict[str, torch.Tensor]
    encoder: dict[str, torch.Tensor]
    architecture: dict[str, Any]
    architecture_source: str
    training_config: dict[str, Any] | None
    meta: dict[str, Any] | None


def _json_file(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, `None` where there is no such file (`io_utils.read_json_object`)."""
    return read_json_object(path, path.stem)


def resolve_architecture(
    folder: Path, training_config: dict[str, Any] | None, override: str | os.PathLike | None
) -> tuple[dict[str, Any], str]:
    """The architecture json and where it came from: ``override``, else the file ``config.json``'s ``config_path``
    names if it is in the folder, else `PUBLISHED_ARCHITECTURE`."""
    if override is not None:
        data = _json_file(Path(override))
        if data is None:
            raise ValueError(f"architecture file {str(override)!r} does not exist.")
        return data, str(override)
    named = (training_config or {}).get("config_path")
    if isinstance(named, str) and named:
        candidate = folder / os.path.basename(named.replace("\\", "/"))
        data = _json_file(candidate) if candidate.name != "config.json" else None
        if data is not None:
            return data, candidate.name
    return copy.deepcopy(PUBLISHED_ARCHITECTURE), "cnn_50_100_512_4096_sample.json (published with ELMoForManyLangs)"


def check_architecture(arch: dict[str, Any], source: str) -> None:
    """Raise a `ValueError` naming the architecture file and the key unless every value the converter reads has
    its type: ``token_embedder`` and ``encoder`` objects, their ``name`` strings, ``activation`` ``relu``/``tanh``,
    ``cell_clip``/``proj_clip`` numbers >= 0 or null, ``max_characters_per_token`` an integer."""

    def bad(key: str, value: Any, wanted: str) -> ValueError:
        text = json_repr(value)
        text = text if len(text) <= 60 else f"{text[:60]}... ({len(text):,} characters)"
        return ValueError(f"architecture file {source!r}: {key} must be {wanted}, got {text}.")

    sections = {}
    for section in ("token_embedder", "encoder"):
        value = arch.get(section, {})
        if not isinstance(value, dict):
            raise bad(f'"{section}"', value, "an object")
        sections[section] = value
        if not isinstance(value.get("name", ""), str):
            raise bad(f'"{section}"."name"', value["name"], "a string")
    embedder, encoder = sections["token_embedder"], sections["encoder"]
    if embedder.get("activation", "relu") not in ("relu", "tanh"):
        raise bad('"token_embedder"."activation"', embedder["activation"], '"relu" or "tanh"')
    for key in ("cell_clip", "proj_clip"):
        value = encoder.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
        ):
            raise bad(f'"encoder"."{key}"', value, "a number >= 0 (0: no clipping) or null")
    value = embedder.get("max_characters_per_token", 50)
    if isinstance(value, bool) or not isinstance(value, int) or not 3 <= value <= 1024:
        raise bad('"token_embedder"."max_characters_per_token"', value, "an integer from 3 to 1024")


def json_repr(value: Any) -> str:
    """``value`` as JSON writes it (what the user sees in the file)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def read_efml_model(
    folder: str | os.PathLike, architecture: str | os.PathLike | None = None, shown_as: str | None = None
) -> EfmlModel:
    """Read the model in ``folder`` (or the one folder below it that holds it). A missing file, a damaged
    vocabulary or weight file, a wrongly typed architecture value, or a pickle referencing anything but tensors
    is a `ValueError` naming the file; messages call ``folder`` ``shown_as`` where given (the zip it came from)."""
    folder = model_folder_of(folder, shown_as)
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise ValueError(
            f"{shown_as or str(folder)!r} is not a complete ELMoForManyLangs model: {', '.join(missing)} missing."
        )
    training_config = _json_file(folder / "config.json")
    arch, source = resolve_architecture(folder, training_config, architecture)
    check_architecture(arch, source)
    token_embedder = load_state_dict(folder / "token_embedder.pkl")
    encoder = load_state_dict(folder / "encoder.pkl")
    chars = read_dic(folder / "char.dic", CHAR_SYMBOLS)
    words = read_dic(folder / "word.dic") if "word_emb_layer.embedding.weight" in token_embedder else None
    if words is None and (folder / "word.dic").is_file():
        logger.info("word.dic is not used: the model has no word embedding")
    return EfmlModel(
        folder=folder,
        chars=chars,
        words=words,
        token_embedder=token_embedder,
        encoder=encoder,
        architecture=arch,
        architecture_source=source,
        training_config=training_config,
        meta=_json_file(folder / "meta.json"),
    )


__all__ = [
    "ALLOWED_PICKLE_GLOBALS",
    "CHAR_SYMBOLS",
    "Dictionary",
    "EfmlModel",
    "PUBLISHED_ARCHITECTURE",
    "WORD_SYMBOLS",
    "check_architecture",
    "check_tensor_storage",
    "load_state_dict",
    "model_folder_of",
    "pickle_references",
    "read_dic",
    "read_efml_model",
    "safe_extract_zip",
]
