"""Windows (hand-computed geometry) and one-pass measures (vs greedy decoding and an unbatched computation)."""

from __future__ import annotations

import math

import pytest
import torch

from goldfish.eval import extraction
from goldfish.eval.generate import generate
from goldfish.eval.windows import ALL, EvalDocument, build_windows, window_key, windows_sha256
from goldfish.errors import UserError

from eval_fixtures import tiny_llama
from tolerances import U64, llama_terms, rounding

S = 8


def _doc(n: int, id_: str = "d") -> EvalDocument:
    return EvalDocument(id=id_, tokens=tuple(range(100, 100 + n)))


def test_window_geometry_by_hand():
    doc = _doc(20)
    (end,), _ = build_windows([doc], [5], 4, ["end"])
    assert (end.start, end.prefix, end.suffix) == (11, tuple(range(111, 116)), tuple(range(116, 120)))
    (start,), _ = build_windows([doc], [5], 4, ["start"])
    assert (start.start, start.prefix, start.suffix) == (0, tuple(range(100, 105)), tuple(range(105, 109)))
    stride, _ = build_windows([doc], [5], 4, ["stride"], stride=3)
    # strided starts 0, 3, 6, 9 (12 would need 21 tokens), then the window ending at the document's end (start
    # 20 - 5 - 4 = 11), so the suffixes cover tokens 5..19: every token after the first P
    assert [w.start for w in stride] == [0, 3, 6, 9, 11]
    assert stride[-2].suffix == tuple(range(114, 118)) and stride[-1].suffix == tuple(range(116, 120))
    covered = {t for w in stride for t in w.suffix}
    assert covered == set(range(105, 120))
    exact, _ = build_windows([_doc(21)], [5], 4, ["stride"], stride=4)  # 0, 4, 8, 12: the last one already ends
    assert [w.start for w in exact] == [0, 4, 8, 12]  # at token 21, no extra window
    for placement in ("end", "start", "stride"):
        (w,), _ = build_windows([doc], [ALL], 4, [placement])
        assert (w.start, len(w.prefix), w.suffix) == (0, 16, tuple(range(116, 120)))
        assert w.prefix_len == ALL


def test_offsets_and_max_offset_by_hand():
    doc = _doc(40)
    offs, _ = build_windows([doc], [5], 4, ["offsets"], offsets=[0, 10, 31, 32])
    assert [w.start for w in offs] == [0, 10, 31]  # 32 + 5 + 4 = 41 > 40 tokens: no window there
    assert offs[1].prefix == tuple(range(110, 115)) and offs[1].suffix == tuple(range(115, 119))
    capped, _ = build_windows([doc], [5], 4, ["offsets", "stride"], stride=6, offsets=[0, 10, 31], max_offset=12)
    assert [(w.placement, w.start) for w in capped] == [
        ("offsets", 0),
        ("offsets", 10),
        ("stride", 0),
        ("stride", 6),
        ("stride", 12),
    ]
    (start,), _ = build_windows([doc], [5], 4, ["start"], max_offset=0)  # start windows are not capped away
    assert start.start == 0


def test_short_documents_are_skipped_and_counted():
    docs = [_doc(30, "long"), _doc(10, "short"), _doc(13, "exact")]
    windows, skipped = build_windows(docs, [5, 20], 8, ["end"])
    assert [(w.doc.id, w.prefix_len) for w in windows] == [("long", 5), ("long", 20), ("exact", 5)]
    assert skipped == 3  # short@5, short@20, exact@20
    with pytest.raises(UserError, match="too short"):
        build_windows([_doc(10), _doc(12)], [5], 8)
    with pytest.raises(UserError, match="placement"):
        build_windows(docs, [5], 8, ["middle"])


def test_window_keys_are_stable_and_specific():
    toks = tuple(range(30))
    k = window_key(toks, 5, 8, "end", 17)
    assert k == window_key(list(toks), 5, 8, "end", 17)
    others = {
        window_key(toks, 6, 8, "end", 17),
        window_key(toks, 5, 9, "end", 17),
        window_key(toks, 5, 8, "start", 17),
        window_key(toks, 5, 8, "end", 16),
        window_key(toks[:-1] + (99,), 5, 8, "end", 17),
    }
    assert k not in others and len(others) == 5
    w1, _ = build_windows([_doc(30)], [5, 10], 8)
    w2, _ = build_windows([_doc(30)], [10, 5], 8)
    assert windows_sha256(w1) != windows_sha256(w2) and windows_sha256(w1) == windows_sha256(list(w1))


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=128, seed=1, init=0.3)


def _cases(model, n=12, seed=0):
    """Prefixes with three kinds of suffix: the model's own greedy continuation (extractable), that continuation
    with token j changed (extractable up to j), and random tokens."""
    g = torch.Generator().manual_seed(seed)
    prefixes = [torch.randint(1, 128, (int(k),), generator=g).tolist() for k in torch.randint(2, 16, (n,), generator=g)]
    greedy = generate(model, prefixes, S, progress=False)
    suffixes, expect_run = [], []
    for i, gen in enumerate(greedy):
        kind = i % 3
        if kind == 0:
            suffixes.append(gen), expect_run.append(S)
        elif kind == 1:
            j = i % S
            suffixes.append(gen[:j] + [(gen[j] + 1) % 128] + gen[j + 1 :]), expect_run.append(j)
        else:
            suffixes.append(torch.randint(1, 128, (S,), generator=g).tolist()), expect_run.append(None)
    return prefixes, suffixes, greedy, expect_run


def test_onepass_verdicts_equal_greedy_verdicts(model):
    prefixes, suffixes, greedy, expect_run = _cases(model)
    res = extraction.onepass(model, prefixes, suffixes, batch_size=5, progress=False)
    generated_exact = [g == s for g, s in zip(greedy, suffixes)]
    assert [r["onepass_exact"] for r in res] == generated_exact
    assert sum(generated_exact) == 4
    for r, run in zip(res, expect_run):
        if run is not None:
            assert r["extraction_strength"] == run / S  # a count over S: one rounded division, as run / S is
    assert all(r["onepass_token_acc"] == 1.0 for r, run in zip(res, expect_run) if run == S)


def test_suffix_logprob_equals_unbatched_log_softmax(model):
    prefixes, suffixes, _, _ = _cases(model, n=6, seed=3)
    res = extraction.onepass(model, prefixes, suffixes, batch_size=4, progress=False)
    for p, s, r in zip(prefixes, suffixes, res):
        with torch.no_grad():
            logits = model(torch.tensor([p + s])).logits[0].double()  # (T, V), no padding at all
        logp = torch.log_softmax(logits, -1)
        terms = [float(logp[len(p) - 1 + t, s[t]]) for t in range(S)]
        expected = sum(terms)
        # each log-prob through the tiny model (hidden 32, MLP 64, 2 layers, heads of 8, <= 24 positions, vocabulary
        # 128) in another batch shape and padding, then a sum of S: absolute, relative to the terms' scale
        forward = llama_terms(hidden=32, intermediate=64, layers=2, head_dim=8, seq=16 + S, vocab=128)
        tol = rounding(forward + S) * sum(abs(t) for t in terms)
        assert r["suffix_logprob"] == pytest.approx(expected, abs=tol)
        assert r["p_suffix"] == pytest.approx(math.exp(expected), rel=tol + rounding(1))  # exp: d(log p) = dp / p


def test_np_extraction_hand_values():
    f64 = rounding(3, U64)  # float64 log1p, a product and expm1, each within an ulp or so
    assert extraction.np_extraction(0.5, 2) == pytest.approx(0.75, rel=f64, abs=0)
    assert extraction.np_extraction(1.0, 3) == 1.0 and extraction.np_extraction(0.0, 1000) == 0.0
    assert extraction.np_extraction(1e-20, 100) == pytest.approx(1e-18, rel=f64, abs=0)  # naive 1-(1-p)^n gives 0
    assert extraction.np_extraction([0.1, 0.2], 1).tolist() == pytest.approx([0.1, 0.2], rel=f64, abs=0)


def test_sample_hits_count_reproductions(model):
    prefixes, suffixes, _, expect_run = _cases(model, n=6, seed=5)
    cold = extraction.sample_hits(model, prefixes, suffixes, 3, temperature=1e-4, seed=0, progress=False)
    assert cold == [3 if run == S else 0 for run in expect_run]  # near-zero temperature = greedy
    warm1 = extraction.sample_hits(model, prefixes, suffixes, 4, temperature=1.0, seed=7, progress=False)
    warm2 = extraction.sample_hits(model, prefixes, suffixes, 4, temperature=1.0, seed=7, progress=False)
    assert warm1 == warm2 and all(0 <= h <= 4 for h in warm1)


def test_a_document_too_short_for_every_window_gets_one_by_the_short_rule():
    """Issue 58: the suffix is the document's last half (at most S tokens), the prompt every token before it;
    under min(S, 8) suffix tokens there is no window."""
    from goldfish.eval.windows import short_window

    docs = [_doc(60, "a"), _doc(16, "b"), _doc(15, "c"), _doc(200, "d")]
    windows, skipped = build_windows(docs, [32], 50, ["stride"])
    short = [
        (w.doc.id, w.placement, w.prefix_len, w.start, len(w.prefix), len(w.suffix), w.suffix_len)
        for w in windows
        if w.placement == "short"
    ]
    assert short == [("a", "short", ALL, 0, 30, 30, 30), ("b", "short", ALL, 0, 8, 8, 8)]  # c: 7 < 8, no window
    assert skipped == 3 and {w.doc.id for w in windows if w.placement == "stride"} == {"d"}
    (a,) = [w for w in windows if w.doc.id == "a"]
    assert a.prefix + a.suffix == docs[0].tokens
    assert short_window(300, 50) == (250, 50) and short_window(15, 50) is None  # at most S; at least 8 tokens
    assert short_window(8, 4) == (4, 4) and short_window(7, 4) is None  # S under 8: at least S tokens
