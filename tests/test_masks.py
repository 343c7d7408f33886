"""Goldfish masks against independent expectations: the paper's own hash-table code (ported), a loop-based reference
implementation of the documented window rule, statistics, and invariances."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from tolerances import proportion_se

from goldfish import GoldfishConfig, goldfish_mask
from goldfish import goldfish_mask as _goldfish_mask
from goldfish.errors import ConfigError

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- an independent, per-token reference of "hash"


def _mix_py(x: int) -> int:
    """splitmix64 finaliser on Python ints (unsigned 64-bit), written from the published constants."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


PRECEDING_TAG = 0x5052454345444500  # "PRECEDE": hash-preceding's salt, from its documentation


def reference_hash_mask(
    row: list[int],
    k: int,
    h: int,
    specials: set[int],
    docs: list[int] | None = None,
    seed: int = 0,
    preceding: bool = False,
) -> list[bool]:
    """The documented rule, token by token: the window of t is t-h+1..t (``preceding``: t-h..t-1, an empty window
    never dropped), cut at the document start; documents start at the row start, at/after special tokens, and
    where docs change."""
    lag, tag = (1, PRECEDING_TAG) if preceding else (0, 0)
    out = []
    for t, tok in enumerate(row):
        if tok in specials or tok < 0:
            out.append(False)
            continue
        start = t  # the document's first position in reach of t's window
        while (
            start - 1 >= 0
            and t - (start - 1) < h + lag
            and row[start - 1] not in specials
            and row[start - 1] >= 0
            and (docs is None or docs[start - 1] == docs[t])
        ):
            start -= 1
        window = row[start : t + 1 - lag]
        acc = _mix_py(((seed * 0x9E3779B97F4A7C15) & MASK64) ^ h ^ tag)
        for x in window:
            acc = _mix_py(acc ^ (x + 1))
        out.append(bool(window) and (acc >> 11) < (1 << 53) // k)
    return out


@pytest.mark.parametrize("strategy", ["hash", "hash-preceding"])
def test_hash_matches_loop_reference_with_documents_and_specials(strategy):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (4, 70), generator=g)
    ids[ids < 3] = 0  # id 0 is special here (e.g. EOS), appearing at random places
    docs = torch.cumsum(torch.rand(4, 70, generator=g) < 0.05, dim=1)
    for k, h in [(4, 13), (3, 5), (2, 1)]:
        mask = goldfish_mask(ids, k, h, strategy, special_ids=[0], document_ids=docs, seed=7)
        for b in range(4):
            ref = reference_hash_mask(
                ids[b].tolist(), k, h, {0}, docs[b].tolist(), seed=7, preceding=strategy == "hash-preceding"
            )
            assert mask[b].tolist() == ref


def test_hash_preceding_decision_does_not_depend_on_the_target():
    g = torch.Generator().manual_seed(13)
    ids = torch.randint(0, 50_000, (2000, 30), generator=g)
    other = ids.clone()
    other[:, -1] = torch.randint(0, 50_000, (2000,), generator=g)  # a different target after the same context
    a, b = goldfish_mask(ids, 4, 13, "hash-preceding"), goldfish_mask(other, 4, 13, "hash-preceding")
    assert torch.equal(a[:, -1], b[:, -1])
    # under "hash" the target is in its window: independent decisions disagree 2·(1/4)·(3/4) = 37.5 % of the time
    assert abs((goldfish_mask(ids, 4, 13)[:, -1] != goldfish_mask(other, 4, 13)[:, -1]).float().mean() - 0.375) < 0.04
    # salted apart from "hash": not hash's mask shifted by one position (same window t-h..t-1)
    shifted = goldfish_mask(ids, 4, 13)[:, 13:-1]
    assert abs((a[:, 14:] != shifted).float().mean().item() - 0.375) < 0.02


# ---------------------------------------------------------------- hash-table against the reference implementation

# Ported from the paper's own code: github.com/ahans30/goldfish-loss, lit_gpt/utils.py at commit
# 70bfad87dcf69da2921bcad08e662925ab2ab60b (`_load_hash_table` and the "hash-table" branch of `apply_goldfish`),
# with the device fixed to the CPU (the original drew its table on the training GPU) and the dropped positions returned
# as a (B, T) mask instead of the labels with -100 written in. Everything else is the reference's arithmetic verbatim.
REFERENCE_TABLE_SIZE = 1_000_003
_reference_hash_table = None


def _reference_load_hash_table(device):
    global _reference_hash_table
    rng = torch.Generator(device=device)
    rng.manual_seed(2971215073)  # fib47 is prime
    _reference_hash_table = torch.rand(REFERENCE_TABLE_SIZE, device=device, generator=rng)


def reference_hash_table_mask(targets: torch.Tensor, k: int, goldfish_context_width: int) -> torch.Tensor:
    """(B, T) bool: True where the reference's "hash-table" strategy sets the target to ignore_index."""
    if _reference_hash_table is None:
        _reference_load_hash_table(targets.device)
    contexts = targets.unfold(1, goldfish_context_width, 1)
    hashed_keys = _reference_hash_table[contexts.prod(dim=-1) % REFERENCE_TABLE_SIZE]
    dropped_token_indices = hashed_keys < 1 / k
    out = torch.zeros_like(targets, dtype=torch.bool)
    out[:, goldfish_context_width - 1 :][dropped_token_indices] = True
    return out


def test_hash_table_matches_the_reference_implementation():
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 50_000, (8, 300), generator=g)
    ids[0, 40:60] = 0  # windows holding id 0 (key 0) and products that wrap int64, as in real batches
    for k, h in [(4, 13), (3, 4), (2, 1)]:
        assert torch.equal(goldfish_mask(ids, k, h, strategy="hash-table"), reference_hash_table_mask(ids, k, h))


def test_hash_table_vector_derived_from_the_reference():
    seq = torch.tensor([(i * 7919) % 32000 + 2 for i in range(64)])
    expected = reference_hash_table_mask(seq[None], k=4, goldfish_context_width=13)[0]
    # the vector the ported reference gives (pinned, so a change of torch's CPU generator shows up here)
    assert expected.nonzero().flatten().tolist() == [12, 16, 19, 24, 31, 36, 37, 38, 41, 49, 50, 53, 57, 60]
    assert torch.equal(goldfish_mask(seq, k=4, h=13, strategy="hash-table"), expected)


def test_hash_table_first_targets_never_dropped_and_order_blind():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 1000, (256, 13), generator=g)
    mask = goldfish_mask(ids, 2, 13, strategy="hash-table")
    assert not mask[:, :12].any()
    perm = ids[:, torch.randperm(13, generator=g)]
    # the documented weakness: a product key ignores order
    assert torch.equal(goldfish_mask(perm, 2, 13, strategy="hash-table")[:, 12], mask[:, 12])


# ---------------------------------------------------------------- statistics


@pytest.mark.parametrize("strategy", ["hash", "hash-preceding"])
@pytest.mark.parametrize("k", [2, 3, 4, 8, 32])
def test_drop_fraction_is_one_in_k(k, strategy):
    g = torch.Generator().manual_seed(k)
    ids = torch.randint(0, 50_257, (500, 2048), generator=g)  # 1.02e6 tokens
    frac = goldfish_mask(ids, k, 13, strategy)[:, 1:].float().mean().item()  # hash-preceding never drops t = 0
    # 4 standard errors of a proportion over the 500 x 2047 decisions (4.9e-4 at k = 2; was 0.005, 10 to 29 of them)
    assert abs(frac - 1 / k) < 4 * proportion_se(1 / k, 500 * 2047)


def test_windows_of_ids_zero_and_one_dropped_like_any_other():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 2, (100, 2000), generator=g)  # only ids 0 and 1: 8192 distinct windows of 13
    frac = goldfish_mask(ids, 4, 13).float().mean().item()
    # a decision is a function of its window, and the 2^13 windows are about equally frequent: the share has the
    # standard error of 8192 trials, proportion_se(0.25, 8192) = 0.0048; 0.02 is 4.2 of them
    assert abs(frac - 0.25) < 0.02
    # the documented weakness of the reference-exact table: every window containing a 0 has key 0,
    # so all of them share one decision (all dropped or none)
    ref = goldfish_mask(ids, 4, 13, strategy="hash-table")[:, 12:]
    has_zero = ids.unfold(1, 13, 1).eq(0).any(-1)
    assert ref[has_zero].unique().numel() == 1


def test_order_sensitive():
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 50_000, (20_000, 13), generator=g)
    permuted = ids.clone()
    permuted[:, :12] = ids[:, :12].flip(1)  # same multiset, same target, different order
    a = goldfish_mask(ids, 4, 13)[:, 12]
    b = goldfish_mask(permuted, 4, 13)[:, 12]
    # independent decisions disagree with probability 2·(1/4)·(3/4) = 0.375
    assert abs((a != b).float().mean().item() - 0.375) < 0.02


def test_first_tokens_of_a_document_are_dropped_at_the_same_rate():
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 50_000, (40_000, 14), generator=g)
    frac = goldfish_mask(ids, 4, 13).float().mean(0)  # every position up to 12 has a window shorter than h
    assert torch.all((frac - 0.25).abs() < 0.015)
    # hash-preceding: the first target has an empty window and is never dropped; from the second on, 1/k
    pre = goldfish_mask(ids, 4, 13, "hash-preceding").float().mean(0)
    assert pre[0] == 0 and torch.all((pre[1:] - 0.25).abs() < 0.015)


def test_static_strategy_drops_every_kth_token_of_each_document():
    ids = torch.tensor([5, 6, 7, 8, 9, 10, 0, 11, 12, 13, 14, 15])
    mask = goldfish_mask(ids, 3, 13, strategy="static", special_ids=[0])
    assert mask.nonzero().flatten().tolist() == [2, 5, 9]


# ---------------------------------------------------------------- invariances: the same text, the same mask


def _doc(n: int, seed: int) -> torch.Tensor:
    return torch.randint(3, 30_000, (n,), generator=torch.Generator().manual_seed(seed))


PAD, EOS, BOS = 0, 1, 2
SPECIALS = [PAD, EOS, BOS]


@pytest.mark.parametrize("strategy", ["hash", "hash-preceding"])
def test_document_mask_invariant_to_batch_padding_and_packing(strategy):
    doc = _doc(40, 10)

    def goldfish_mask(*args, **kwargs):  # this strategy in every call below
        return _goldfish_mask(*args, strategy=strategy, **kwargs)

    alone = goldfish_mask(doc, 4, 13, special_ids=SPECIALS)
    assert alone.any() and not alone.all()
    # batch position and batch size, right and left padding
    other = _doc(50, 11)
    right = torch.full((3, 60), PAD)
    right[0, :50] = other
    right[2, :40] = doc
    left = torch.full((1, 60), PAD)
    left[0, 20:] = doc
    assert torch.equal(goldfish_mask(right, 4, 13, special_ids=SPECIALS)[2, :40], alone)
    assert torch.equal(goldfish_mask(left, 4, 13, special_ids=SPECIALS)[0, 20:], alone)
    # packed after a neighbour, separated by EOS, then BOS
    packed = torch.cat([other, torch.tensor([EOS, BOS]), doc, torch.tensor([EOS])])
    assert torch.equal(goldfish_mask(packed, 4, 13, special_ids=SPECIALS)[52:92], alone)
    # packed with no separator but document_ids / position_ids marking the boundary
    glued = torch.cat([other, doc])
    docs = torch.cat([torch.zeros(50, dtype=torch.long), torch.ones(40, dtype=torch.long)])
    pos = torch.cat([torch.arange(50), torch.arange(40)])
    assert torch.equal(goldfish_mask(glued, 4, 13, document_ids=docs)[50:], alone)
    assert torch.equal(goldfish_mask(glued, 4, 13, position_ids=pos)[50:], alone)


@pytest.mark.parametrize("strategy", ["hash", "hash-preceding"])
def test_special_tokens_never_dropped_and_split_windows(strategy):
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 8, (64, 256), generator=g)  # ids 0..2 special, very frequent
    mask = goldfish_mask(ids, 2, 13, strategy, special_ids=SPECIALS)
    assert not mask[ids < 3].any()
    # a special token never enters a hash: the tokens after it are masked as a fresh document
    row = torch.cat([_doc(30, 1), torch.tensor([EOS]), _doc(20, 2)])
    assert torch.equal(
        goldfish_mask(row, 4, 13, strategy, special_ids=[EOS])[31:], goldfish_mask(_doc(20, 2), 4, 13, strategy)
    )


@pytest.mark.parametrize("strategy", ["hash", "hash-preceding"])
def test_seed_changes_mask(strategy):
    ids = _doc(4000, 12)
    a, b = goldfish_mask(ids, 4, 13, strategy, seed=0), goldfish_mask(ids, 4, 13, strategy, seed=1)
    assert 0.3 < (a != b).float().mean().item() < 0.45


@pytest.mark.parametrize("strategy", ["hash", "hash-preceding"])
def test_mask_identical_in_another_process(strategy):
    code = (
        "import torch; from goldfish import goldfish_mask; "
        "ids = torch.randint(0, 50000, (8, 300), generator=torch.Generator().manual_seed(9)); "
        f"print(''.join('1' if x else '0' for x in goldfish_mask(ids, 4, 13, {strategy!r}).flatten().tolist()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    ids = torch.randint(0, 50000, (8, 300), generator=torch.Generator().manual_seed(9))
    assert out == "".join("1" if x else "0" for x in goldfish_mask(ids, 4, 13, strategy).flatten().tolist())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_and_gpu_masks_bit_identical():
    ids = torch.randint(0, 50_000, (16, 1024), generator=torch.Generator().manual_seed(0))
    for strategy in ("hash", "hash-preceding", "static"):
        assert torch.equal(goldfish_mask(ids, 4, 13, strategy).cpu(), goldfish_mask(ids.cuda(), 4, 13, strategy).cpu())


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"k": 1}, "k=1"),
        ({"k": 2.5}, "k=2.5"),
        ({"h": 0}, "h=0"),
        ({"strategy": "random"}, "strategy='random'"),
    ],
)
def test_bad_parameters_raise_value_error_naming_them(kwargs, needle):
    args = {"k": 4, "h": 13, "strategy": "hash", **kwargs}
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(".", r"\.")) as e:
        goldfish_mask(torch.tensor([1, 2, 3]), **args)
    if "strategy" in kwargs:
        assert "hash, hash-table, canonical, hash-preceding, static" in str(e.value)
    with pytest.raises(ConfigError):
        GoldfishConfig(**{k: v for k, v in args.items()})


def test_non_integer_ids_and_empty_input():
    with pytest.raises(ValueError, match="integer"):
        goldfish_mask(torch.tensor([1.0, 2.0]), 4, 13)
    empty = goldfish_mask(torch.zeros(0, dtype=torch.long), 4, 13)
    assert empty.shape == (0,) and empty.dtype == torch.bool
    assert goldfish_mask(torch.zeros(2, 0, dtype=torch.long), 4, 13).shape == (2, 0)
