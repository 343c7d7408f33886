"""The ``canonical`` mask strategy: a string-level reference of the documented word rule, the invariances of
``hash`` (batch, padding, packing, documents, process, device), 1/k statistics, and near-duplicates: a text and its
case/whitespace variants share >= 90 % of their drop positions (aligned by character offsets), ``hash`` far fewer."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import torch
from tolerances import proportion_se

from goldfish import GoldfishCollator, GoldfishConfig, goldfish_mask
from goldfish.data import load_tokenizer
from goldfish.errors import ConfigError
from goldfish.fold import token_bytes, token_fold
from goldfish.masks import _BLANK_TAG, _CANONICAL_TAG, FOLD_BASE

MASK64 = (1 << 64) - 1
EOT = 50256

TEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named after the "
    "engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889. Locally nicknamed "
    '"La dame de fer" (French for "Iron Lady"), it was constructed as the centrepiece of the 1889 World\'s Fair, '
    "and to crown the centennial anniversary of the French Revolution. Although initially criticised by some of "
    "France's leading artists and intellectuals for its design, it has since become a global cultural icon of "
    "France and one of the most recognisable structures in the world. The tower received 5,889,000 visitors in "
    "2022. The Eiffel Tower is the most visited monument with an entrance fee in the world: 6.91 million people "
    "ascended it in 2015. It was designated a monument historique in 1964, and was named part of a UNESCO World "
    'Heritage Site ("Paris, Banks of the Seine") in 1991. The tower is 330 metres tall, about the same height as '
    "an 81-storey building, and the tallest structure in Paris. Its base is square, measuring 125 metres on each "
    "side. During its construction, the Eiffel Tower surpassed the Washington Monument to become the tallest "
    "human-made structure in the world, a title it held for 41 years until the Chrysler Building in New York City "
    "was finished in 1930. It was the first structure in the world to surpass both the 200-metre and 300-metre "
    "mark in height. Due to the addition of a broadcasting aerial at the top of the tower in 1957, it is now "
    "taller than the Chrysler Building by 5.2 metres. Excluding transmitters, the Eiffel Tower is the second "
    "tallest free-standing structure in France after the Millau Viaduct."
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("gpt2")


@pytest.fixture(scope="module")
def fold(tok):
    return token_fold(tok)


# ---------------------------------------------------------------- an independent, string-level reference


def _mix_py(x: int) -> int:
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def _poly(s: str) -> int:
    acc = 0
    for b in s.encode():
        acc = (acc * FOLD_BASE + b + 1) & MASK64
    return acc


def reference_canonical(pieces: list[str | None], k: int, h: int, docs: list[int], seed: int = 0) -> list[bool]:
    """The documented rule on decoded strings (None = special): words start at a document start, at leading
    whitespace or after whitespace; key = the h-1 complete folded words before + the folded prefix of the word."""
    out = []
    words: list[str] = []  # complete folded words of the current document
    current: str | None = None  # folded prefix of the open word
    for t, p in enumerate(pieces):
        if p is None or t == 0 or docs[t] != docs[t - 1] or pieces[t - 1] is None:
            words, current = [], None  # a new document
        if p is None:
            out.append(False)
            continue
        folded = "".join(p.lower().split())
        if not folded:  # whitespace only: closes the open word
            if current is not None:
                words.append(current)
            current = None
        elif current is None or p[0].isspace():
            if current is not None:
                words.append(current)
            current = folded
        else:
            current += folded
        acc = _mix_py(((seed * 0x9E3779B97F4A7C15) & MASK64) ^ h ^ _CANONICAL_TAG)
        for w in words[max(0, len(words) - (h - 1)) :] if h > 1 else []:
            acc = _mix_py(acc ^ _poly(w))
        acc = _mix_py(acc ^ (_poly(current) if folded else _BLANK_TAG & MASK64))
        out.append((acc >> 11) < (1 << 53) // k)
        if folded and p[-1].isspace():
            words.append(current)
            current = None
    return out


def test_canonical_matches_string_reference_with_documents_and_specials(tok, fold):
    ids = tok(TEXT.replace(". ", ".\n\n  ", 3), add_special_tokens=False)["input_ids"][:300]
    rows = torch.tensor(ids).view(3, 100)
    rows[0, 40] = rows[2, 7] = EOT
    docs = torch.zeros(3, 100, dtype=torch.long)
    docs[1, 55:] = 1
    for k, h, seed in [(4, 13, 0), (3, 5, 7), (2, 1, 1)]:
        mask = goldfish_mask(rows, k, h, "canonical", [EOT], document_ids=docs, seed=seed, fold=fold)
        for b in range(3):
            pieces = [None if i == EOT else tok.decode([i]) for i in rows[b].tolist()]
            assert mask[b].tolist() == reference_canonical(pieces, k, h, docs[b].tolist(), seed)


# ---------------------------------------------------------------- the fold table


def test_fold_table_of_gpt2(tok, fold):
    the = [tok.convert_tokens_to_ids(t) for t in ("The", "\u0120The", "\u0120the", "the", "\u0120THE")]
    assert len(set(the)) == 5 and len({int(fold.piece[i]) for i in the}) == 1  # one folded form
    assert [bool(fold.starts[i]) for i in the] == [False, True, True, False, True]
    newline, space = tok.convert_tokens_to_ids("\u010a"), tok.convert_tokens_to_ids("\u0120")
    assert fold.blank[newline] and fold.blank[space] and fold.ends[newline] and not fold.blank[the[0]]
    assert int(fold.scale[the[0]]) == pow(FOLD_BASE, 3, 1 << 64) - (1 << 64) * (pow(FOLD_BASE, 3, 1 << 64) >= 1 << 63)
    assert token_bytes(tok)[15496] == b"Hello" and token_bytes(tok)[995] == b" world"


def test_fold_table_of_a_sentencepiece_vocabulary():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "\u2581The": 1, "\u2581the": 2, "cat": 3, "<0x0A>": 4, "\u2581": 5}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    sp = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    assert token_bytes(sp)[1:] == [b" The", b" the", b"cat", b"\n", b" "]
    f = token_fold(sp)
    assert f.piece[1] == f.piece[2] and f.starts[1] and not f.starts[3] and f.blank[4] and f.blank[5]


# ---------------------------------------------------------------- near-duplicates: case and whitespace variants


def _drop_ends(tok, fold, text: str, strategy: str) -> set[int]:
    """Drop positions of ``text`` as end offsets in its whitespace-free text (so variants align)."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = goldfish_mask(torch.tensor(enc["input_ids"]), 4, 13, strategy, [EOT], fold=fold).tolist()
    nonspace = [0]
    for ch in text:
        nonspace.append(nonspace[-1] + (not ch.isspace()))
    return {nonspace[e] for (s, e), dropped in zip(enc["offset_mapping"], mask) if dropped and text[s:e].strip()}


def _variants(text: str) -> dict[str, str]:
    rng = random.Random(0)
    words = text.split(" ")
    return {
        "lowercase": text.lower(),
        "uppercase": text.upper(),
        "title case": " ".join(w.capitalize() for w in words),
        "every 5th word upper": " ".join(w.upper() if i % 5 == 0 else w for i, w in enumerate(words)),
        "double spaces and newlines": "".join(w + rng.choice([" ", " ", "  ", "\n", "\n\n"]) for w in words),
        "mixed": "".join((w.lower() if rng.random() < 0.5 else w) + rng.choice([" ", "\t"]) for w in words),
    }


def test_case_and_whitespace_variants_share_drop_positions(tok, fold):
    base = {s: _drop_ends(tok, fold, TEXT, s) for s in ("canonical", "hash")}
    assert len(base["canonical"]) > 60
    for name, variant in _variants(TEXT).items():
        shared = {s: len(base[s] & _drop_ends(tok, fold, variant, s)) / len(base[s]) for s in base}
        assert shared["canonical"] >= 0.9, (name, shared)
        assert shared["hash"] <= 0.6, (name, shared)  # any changed token re-draws the next 13 decisions


def test_a_changed_word_only_moves_the_next_h_words(tok, fold):
    edited = TEXT.replace("wrought-iron", "cast-iron", 1)
    a, b = _drop_ends(tok, fold, TEXT, "canonical"), _drop_ends(tok, fold, edited, "canonical")
    shift = len("wrought") - len("cast")
    cut = TEXT.index("wrought") - TEXT[: TEXT.index("wrought")].count(" ")
    far = TEXT.index("after the engineer")  # 14 words after the edit: out of every window of h=13 words
    far -= TEXT[:far].count(" ")
    assert {e for e in a if e > far} == {e + shift for e in b if e + shift > far}
    assert {e for e in a if e < cut} == {e for e in b if e < cut}


# ---------------------------------------------------------------- statistics


@pytest.mark.parametrize("k", [2, 4, 8])
def test_drop_fraction_is_one_in_k_on_random_vocabulary_ids(fold, k):
    ids = torch.randint(0, 50_256, (200, 1024), generator=torch.Generator().manual_seed(k))
    frac = goldfish_mask(ids, k, 13, "canonical", [EOT], fold=fold).float().mean().item()
    # 4 standard errors of a proportion over 200 x 1024 decisions (0.0044 at k = 2; was 0.006, 5 to 8 of them)
    assert abs(frac - 1 / k) < 4 * proportion_se(1 / k, ids.numel())


def test_drop_fraction_on_text(tok, fold):
    words = TEXT.split()
    rng = random.Random(1)
    text = " ".join(" ".join(rng.sample(words, len(words))) for _ in range(20))  # ~5,800 words, ~7,000 tokens
    ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"])
    assert abs(goldfish_mask(ids, 4, 13, "canonical", fold=fold).float().mean().item() - 0.25) < 0.02


# ---------------------------------------------------------------- invariances shared with "hash"


def test_document_mask_invariant_to_batch_padding_and_packing(tok, fold):
    def mask(x, **kw):
        return goldfish_mask(x, 4, 13, "canonical", [EOT], fold=fold, **kw)

    doc = torch.tensor(tok(TEXT[:300], add_special_tokens=False)["input_ids"])
    other = torch.tensor(tok(TEXT[300:700], add_special_tokens=False)["input_ids"])
    n, m = len(doc), len(other)
    alone = mask(doc)
    assert alone.any() and not alone.all()
    right = torch.full((3, 120), EOT)
    right[0, :m] = other
    right[2, :n] = doc
    left = torch.full((1, 120), EOT)
    left[0, 120 - n :] = doc
    assert torch.equal(mask(right)[2, :n], alone)
    assert torch.equal(mask(left)[0, 120 - n :], alone)
    packed = torch.cat([other, torch.tensor([EOT]), doc, torch.tensor([EOT])])
    assert torch.equal(mask(packed)[m + 1 : m + 1 + n], alone)
    glued = torch.cat([other, doc])
    docs = torch.cat([torch.zeros(m, dtype=torch.long), torch.ones(n, dtype=torch.long)])
    pos = torch.cat([torch.arange(m), torch.arange(n)])
    assert torch.equal(mask(glued, document_ids=docs)[m:], alone)
    assert torch.equal(mask(glued, position_ids=pos)[m:], alone)
    assert not torch.equal(mask(glued)[m:], alone)  # without the boundary the neighbour's words enter the windows


def test_seed_changes_mask_and_strategy_differs_from_hash(fold):
    ids = torch.randint(0, 50_000, (4000,), generator=torch.Generator().manual_seed(12))
    a, b = (goldfish_mask(ids, 4, 13, "canonical", fold=fold, seed=s) for s in (0, 1))
    assert 0.3 < (a != b).float().mean().item() < 0.45
    assert 0.3 < (a != goldfish_mask(ids, 4, 13)).float().mean().item() < 0.45


def test_mask_identical_in_another_process(fold):
    code = (
        "import torch; from goldfish import goldfish_mask; from goldfish.data import load_tokenizer; "
        "from goldfish.fold import token_fold; f = token_fold(load_tokenizer('gpt2')); "
        "ids = torch.randint(0, 50000, (8, 300), generator=torch.Generator().manual_seed(9)); "
        "m = goldfish_mask(ids, 4, 13, 'canonical', fold=f); print(''.join(str(int(x)) for x in m.flatten()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    ids = torch.randint(0, 50000, (8, 300), generator=torch.Generator().manual_seed(9))
    assert out == "".join(str(int(x)) for x in goldfish_mask(ids, 4, 13, "canonical", fold=fold).flatten())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_and_gpu_masks_bit_identical(fold):
    ids = torch.randint(0, 50_000, (16, 1024), generator=torch.Generator().manual_seed(0))
    cpu = goldfish_mask(ids, 4, 13, "canonical", fold=fold)
    assert torch.equal(cpu, goldfish_mask(ids.cuda(), 4, 13, "canonical", fold=fold).cpu())


# ---------------------------------------------------------------- the API around it


def test_missing_or_foreign_fold_is_refused(fold):
    with pytest.raises(ConfigError, match="fold table"):
        goldfish_mask(torch.tensor([1, 2, 3]), 4, 13, "canonical")
    with pytest.raises(ValueError, match="outside the fold table"):
        goldfish_mask(torch.tensor([1, 60_000]), 4, 13, "canonical", fold=fold)


def test_config_collator_and_yaml(tok, fold, tmp_path):
    from goldfish.config import load_config, save_config, to_dict

    path = tmp_path / "g.yaml"
    path.write_text("strategy: canonical\nk: 3\n")
    cfg = load_config(GoldfishConfig, path)
    assert cfg.strategy == "canonical" and cfg.fold is None and "fold" not in to_dict(cfg)
    save_config(GoldfishConfig(strategy="canonical", fold=fold), tmp_path / "saved.yaml")
    assert "fold" not in (tmp_path / "saved.yaml").read_text()
    with pytest.raises(ConfigError, match="unknown config key 'fold'"):
        load_config(GoldfishConfig, None, ["fold=1"])
    ids = tok([TEXT[:200]], add_special_tokens=False)["input_ids"][0]
    collator = GoldfishCollator(lambda feats: {"input_ids": torch.tensor([f["input_ids"] for f in feats])}, cfg, tok)
    labels = collator([{"input_ids": ids}])["labels"][0]
    expected = goldfish_mask(torch.tensor(ids), 3, 13, "canonical", [EOT], fold=fold)
    assert torch.equal(labels == -100, expected)


def test_mask_command_with_canonical(capsys):
    import json

    from goldfish.cli import main

    assert (
        main(
            [
                "mask",
                "--text",
                "Hello world. HELLO   World.",
                "--strategy",
                "canonical",
                "--k",
                "2",
                "--h",
                "2",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["strategy"] == "canonical" and out["tokens"][:2] == [15496, 995]
    pieces, dropped = out["pieces"], out["dropped"]
    # the same two words in another case and spacing: the word-final tokens get the same decisions
    assert dropped[pieces.index(" world")] == dropped[len(pieces) - 1 - pieces[::-1].index(" World")]


def test_trainer_drops_the_canonical_mask_of_its_rows(data, tmp_path, one_thread):
    """One epoch with strategy=canonical on the word-level test tokenizer: the trainer drops exactly the tokens the
    library's mask drops on the same rows (with the fold table of the data's tokenizer)."""
    import numpy as np
    from train_helpers import EOS, PAD, tiny_config

    from goldfish.config import from_dict
    from goldfish.data import load_prepared
    from goldfish.io import read_jsonl
    from goldfish.train import train
    from goldfish.train_config import TrainConfig

    cfg = tiny_config(
        data,
        tmp_path / "r",
        loss={"type": "goldfish", "goldfish": {"k": 3, "h": 4, "strategy": "canonical"}},
        schedule={"epochs": 1, "global_batch_size": 4, "micro_batch_size": 4},
    )
    records = read_jsonl(train(from_dict(TrainConfig, cfg)) / "metrics.jsonl")
    prepared = load_prepared(data)
    rows = {k: torch.from_numpy(v) for k, v in prepared.train.batch(np.arange(len(prepared.train))).items()}
    wordlevel = token_fold(prepared.tokenizer)
    assert wordlevel.starts[3:].all()  # no token carries whitespace: each one is a word
    mask = goldfish_mask(
        rows["labels"],
        3,
        4,
        "canonical",
        [PAD, EOS, 2],
        document_ids=rows["document_ids"],
        position_ids=rows["position_ids"],
        fold=wordlevel,
    )
    assert sum(r["dropped_tokens"] for r in records) == int(mask[:, 1:].sum())
