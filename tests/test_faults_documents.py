"""Faults of the regurgitation audit's documents (issue 56): whole-document windows cost linear time, and every
document of an audit is named once and judged on its own windows.

* The default stride windows hashed the whole document into every window's key: quadratic in the length (a 1 M-token
  document took minutes before scoring). The keys are checked here against the old construction, written out
  independently, on small documents (unchanged there), and the bytes hashed are counted -- not timed -- for a
  document 4x longer (4x the bytes, not 16x).
* The same text under ids ``m1`` and ``m2`` gave ``m1`` 0 windows and the verdict ``too_short``; one id used for two
  texts was accepted, two verdicts sharing a name.
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from goldfish.cli import main
from goldfish.errors import UserError
from goldfish.eval import windows as windows_module
from goldfish.eval.inputs import tokenize_jsonl
from goldfish.eval.windows import KEY_TOKEN_BYTES, EvalDocument, build_windows, window_key


def _doc(n: int, seed: int = 0, doc_id: str = "d") -> EvalDocument:
    rng = random.Random(seed)
    return EvalDocument(id=doc_id, tokens=tuple(rng.randrange(50_000) for _ in range(n)))


def _old_key(tokens, prefix_len, suffix_len, placement, start, _packed={}) -> str:
    """The key before issue 56, by hand: sha256 of a header and every token as 8 little-endian bytes."""
    if tokens not in _packed:
        _packed.clear()
        _packed[tokens] = b"".join(t.to_bytes(8, "little", signed=True) for t in tokens)
    data = f"goldfish-window/1|{prefix_len}|{suffix_len}|{placement}|{start}|".encode()
    return hashlib.sha256(data + _packed[tokens]).hexdigest()


def _old_starts(n: int, p: int, s: int, stride: int) -> list[int]:
    last = n - p - s
    found = list(range(0, last + 1, stride)) if last >= 0 else []
    return found + [last] if found and found[-1] < last else found


def test_window_keys_on_small_documents_are_the_old_ones():
    docs = [_doc(n, seed=n, doc_id=f"d{n}") for n in (9, 57, 300, KEY_TOKEN_BYTES // 8)]  # the last: at the bound
    windows, skipped = build_windows(docs, [4, 16], 5, ["stride", "end"], stride=40)
    want = []
    for d in docs:
        for p in (4, 16):
            want += [(d.id, p, "stride", s) for s in _old_starts(len(d.tokens), p, 5, 40)]
            want += [(d.id, p, "end", len(d.tokens) - 5 - p)] if len(d.tokens) >= p + 5 else []
    assert [(w.doc.id, w.prefix_len, w.placement, w.start) for w in windows] == want
    assert skipped == 2  # the 9-token document has no window at P=16 (stride, end)
    for w in windows:
        toks = w.doc.tokens
        assert w.key == _old_key(toks, w.prefix_len, 5, w.placement, w.start)
        assert w.prefix == toks[w.start : w.start + w.prefix_len]
        assert w.suffix == toks[w.start + w.prefix_len : w.start + w.prefix_len + 5]


class _CountingSha256:
    """hashlib.sha256 that adds the bytes it is fed to a shared count."""

    fed = 0

    def __init__(self, data: bytes = b""):
        self._h = hashlib.sha256()
        self.update(data)

    def update(self, data) -> None:
        _CountingSha256.fed += len(data)
        self._h.update(data)

    def digest(self) -> bytes:
        return self._h.digest()

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _bytes_hashed(monkeypatch, n: int) -> tuple[int, int]:
    class Fake:
        sha256 = _CountingSha256

    monkeypatch.setattr(windows_module, "hashlib", Fake)
    _CountingSha256.fed = 0
    windows, _ = build_windows([_doc(n, seed=1)], [50], 50, ["stride"])
    monkeypatch.undo()
    return _CountingSha256.fed, len(windows)


def test_long_document_windows_hash_bytes_linear_in_its_length(monkeypatch):
    small, small_windows = _bytes_hashed(monkeypatch, 20_000)
    large, large_windows = _bytes_hashed(monkeypatch, 80_000)
    assert large_windows > 3.9 * small_windows
    # the document once (8 bytes a token) and a bounded header + digest per window; the old keys hashed 8n per window
    assert small <= 8 * 20_000 + 200 * small_windows and large <= 8 * 80_000 + 200 * large_windows
    assert large < 5 * small  # 4x the length, 4x the bytes (the old construction: 16x)


def test_long_document_keys_name_the_document_and_the_window():
    doc = _doc(KEY_TOKEN_BYTES // 8 + 1000, seed=3)
    windows, _ = build_windows([doc], [20], 10, ["stride"])
    keys = [w.key for w in windows]
    assert len(set(keys)) == len(keys)  # one key per window
    assert keys[7] == window_key(doc.tokens, 20, 10, "stride", windows[7].start)  # the same function, one window
    assert keys[7] != _old_key(doc.tokens, 20, 10, "stride", windows[7].start)  # a new construction, named /2
    changed = EvalDocument(id="d", tokens=doc.tokens[:-1] + (doc.tokens[-1] + 1,))  # its last token only
    again, _ = build_windows([changed], [20], 10, ["stride"])
    assert not set(keys) & {w.key for w in again}  # every key names the whole document, not only its window


def test_a_repeated_id_is_one_error_naming_both_lines(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    lines = [
        {"id": "a", "text": "one"},
        {"id": "m1", "text": "two"},
        {"id": "b", "text": "three"},
        {"id": "m1", "text": "four"},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(UserError) as e:
        tokenize_jsonl(corpus, None)
    msg = str(e.value)
    assert "lines 2 and 4 both have id 'm1'" in msg and "own id" in msg and "\n" not in msg
    # an id given to one line and, by its position, to a line without one is the same name
    corpus.write_text(json.dumps({"id": "1", "text": "x"}) + "\n" + json.dumps({"text": "y"}) + "\n")
    with pytest.raises(UserError, match="lines 1 and 2 both have id '1'"):
        tokenize_jsonl(corpus, None)


@pytest.mark.integration
def test_a_repeated_text_gets_its_own_verdict(tmp_path, capsys):
    from eval_fixtures import TEXTS, save_model_folder, tiny_tokenizer
    from test_eval_audit import P, S, expected, successor_model

    tok = tiny_tokenizer()
    succ: dict[int, int] = {}
    ids = tok(TEXTS[0], add_special_tokens=False)["input_ids"]
    for a, b in zip(ids, ids[1:]):
        succ.setdefault(a, b)
    model = save_model_folder(tmp_path / "model", successor_model(len(tok), succ), tok)
    texts = {"m1": TEXTS[0], "x": TEXTS[3], "m2": TEXTS[0], "m3": TEXTS[3]}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": t, "title": f"t-{k}"}) + "\n" for k, t in texts.items()))
    out = tmp_path / "audit"
    args = [
        "eval",
        "--model",
        str(model),
        "--data",
        str(corpus),
        "--out",
        str(out),
        "progress=false",
        f"data.prefix_lens={P}",
        f"data.suffix_len={S}",
    ]
    assert main(args) == 0
    res = json.loads((out / "results.json").read_text())
    got = {d["doc_id"]: d for d in res["documents"]}
    assert list(got) == list(texts)
    for doc_id, text in texts.items():
        want = expected(tok(text, add_special_tokens=False)["input_ids"], succ)
        assert want["n_windows"] > 0 and {k: got[doc_id][k] for k in want} == want, doc_id
        assert got[doc_id]["title"] == f"t-{doc_id}"
    assert got["m1"]["verdict"] == "regurgitated"
    per_doc = [w["doc_id"] for w in res["windows"]]
    assert per_doc.count("m1") == per_doc.count("m2") == got["m1"]["n_windows"]
    assert "too short" not in capsys.readouterr().err

    # the duplicate id, through the command: one line, exit 2, nothing of the finished audit touched
    before = (out / "results.json").read_bytes()
    corpus.write_text(corpus.read_text() + json.dumps({"id": "x", "text": "other"}) + "\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lines 2 and 5 both have id 'x'" in err and "Traceback" not in err
    assert (out / "results.json").read_bytes() == before
