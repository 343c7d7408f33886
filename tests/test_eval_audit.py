"""The regurgitation audit of a plain corpus (issue 40): ``goldfish eval`` on a JSONL file covers each whole document
with strided windows and answers per document -- regurgitated or not, the longest verbatim span and where.

The model is built so that its greedy continuation is known without running it: its only path from input to
output is embedding -> final norm -> head (attention and MLP outputs are zero), with a one-hot embedding and a head
that maps token t to a chosen successor ``succ[t]`` (token 0 where none). Greedy decoding from any prefix is then
``succ`` applied to the last token again and again, which the test simulates in plain Python -- a second
implementation of the windows and of the verdicts.
"""

from __future__ import annotations

import json
import re

import torch

from goldfish.cli import main

from eval_fixtures import TEXTS, save_model_folder, tiny_tokenizer

P, S = 4, 5


def successor_model(vocab: int, succ: dict[int, int]):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=vocab,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.embed_tokens.weight.copy_(torch.eye(vocab))
        model.model.norm.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        for t, nxt in succ.items():
            model.lm_head.weight[nxt, t] = 1.0
    return model


def expected(ids: list[int], succ: dict[int, int]) -> dict:
    """The audit by hand: strided starts 0, S, 2S ... plus one ending at the document's end; greedy = succ chain."""
    last = len(ids) - P - S
    if last < 0:
        return {"verdict": "too_short"}
    starts = list(range(0, last + 1, S))
    starts += [last] if starts[-1] < last else []
    reproduced = [False] * len(ids)  # tokens some window's greedy continuation reproduced before its first mistake
    exact = 0
    for s in starts:
        token, run = ids[s + P - 1], 0
        for truth in ids[s + P : s + P + S]:
            token = succ.get(token, 0)
            if token != truth:
                break
            reproduced[s + P + run] = True
            run += 1
        exact += run == S
    best = (0, -P)  # no token reproduced: a span of 0 at the first suffix token
    i = 0
    while i < len(ids):  # the longest run of reproduced tokens, the earliest on a tie
        j = i
        while j < len(ids) and reproduced[j]:
            j += 1
        best = max(best, (j - i, -i)) if j > i else best
        i = j + 1
    return {
        "verdict": "regurgitated" if exact else "not_regurgitated",
        "n_windows": len(starts),
        "regurgitated_windows": exact,
        "longest_span": best[0],
        "longest_span_offset": -best[1],
    }


def test_a_corpus_is_audited_document_by_document(tmp_path, capsys):
    tok = tiny_tokenizer()
    memorised = TEXTS[:3]
    succ: dict[int, int] = {}
    for text in memorised:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        for a, b in zip(ids, ids[1:]):
            succ.setdefault(a, b)  # the first successor wins: a repeated token breaks a later run
    model = save_model_folder(tmp_path / "model", successor_model(len(tok), succ), tok)
    texts = (
        memorised
        + TEXTS[3:]
        + [" ".join(reversed(t.split())) for t in TEXTS]
        + [
            TEXTS[0] + " " + TEXTS[4],
            TEXTS[5] + " " + TEXTS[1],
            TEXTS[2] * 3,
            TEXTS[3][:30],
            "Hi.",
            "Call me",
            "The cat",
            "We hold",
        ]
    )
    assert len(texts) == 20
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i:02d}", "body": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "audit"

    # the text sits under "body": one error line names the setting that reads it
    assert main(["eval", "--model", str(model), "--data", str(corpus), "--out", str(out), "progress=false"]) == 2
    err = capsys.readouterr().err
    assert 'line 1 has no "text" string' in err and "data.text_field=body" in err and "Traceback" not in err

    assert (
        main(
            [
                "eval",
                "--model",
                str(model),
                "--data",
                str(corpus),
                "--out",
                str(out),
                "progress=false",
                "data.text_field=body",
                f"data.prefix_lens={P}",
                f"data.suffix_len={S}",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["data"]["window"] == ["stride"]  # the default for a JSONL corpus: whole documents
    docs = {d["doc_id"]: d for d in res["documents"]}
    assert list(docs) == [f"d{i:02d}" for i in range(20)]  # every document, in the corpus' order
    want = {f"d{i:02d}": expected(tok(t, add_special_tokens=False)["input_ids"], succ) for i, t in enumerate(texts)}
    for doc_id, w in want.items():
        got = docs[doc_id]
        assert {k: got[k] for k in w} == w, doc_id
    verdicts = [w["verdict"] for w in want.values()]
    assert {"regurgitated", "not_regurgitated", "too_short"} <= set(verdicts)  # the fixture exercises all three
    assert max(w.get("longest_span", 0) for w in want.values()) > S  # and a span over consecutive windows

    short = verdicts.count("too_short")
    assert f"{short} of 20 documents are too short for any window (fewer than {2 * S} tokens" in captured.err
    hits = [d for d, w in want.items() if w["verdict"] == "regurgitated"]
    assert f"regurgitated: {len(hits)} of 20 documents" in captured.out

    report = (out / "report.md").read_text()
    audit = report.split("## Regurgitation audit")[1].split("\n## ")[0]
    listed = [
        line.split("|")[2].strip()
        for line in audit.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isdigit()
    ]
    order = sorted(hits, key=lambda d: (-want[d]["longest_span"], -want[d]["regurgitated_windows"], d))
    assert listed == order  # every regurgitated document, longest span first
    assert "20 documents (no membership split)" in report and "member" not in audit
    assert f"{short} documents too short for any window" in audit


def test_a_folder_of_text_files_is_a_corpus_too(tmp_path, capsys):
    tok = tiny_tokenizer()
    succ: dict[int, int] = {}
    ids = tok(TEXTS[0], add_special_tokens=False)["input_ids"]
    for a, b in zip(ids, ids[1:]):
        succ.setdefault(a, b)
    model = save_model_folder(tmp_path / "model", successor_model(len(tok), succ), tok)
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    files = {"a.txt": TEXTS[0], "b.md": TEXTS[3], "sub/c.txt": "Hi.", "skip.json": "{}"}
    for name, text in files.items():
        (corpus / name).write_text(text, encoding="utf-8")
    out = tmp_path / "audit"
    assert (
        main(
            [
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
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["data"]["window"] == ["stride"]
    got = {d["doc_id"]: d for d in res["documents"]}
    assert list(got) == ["a.txt", "b.md", "sub/c.txt"]  # every text file below the folder, by path; not the .json
    for name in got:
        want = expected(tok(files[name], add_special_tokens=False)["input_ids"], succ)
        assert {k: got[name][k] for k in want} == want, name
    assert got["a.txt"]["verdict"] == "regurgitated" and got["sub/c.txt"]["verdict"] == "too_short"
    capsys.readouterr()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["eval", "--model", str(model), "--data", str(empty), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither manifest.json" in err and "*.txt" in err


def test_the_default_windows_do_not_change_when_a_prepared_folder_appears(tmp_path):
    """An experiment builds its cells' eval configs before their prepared folder exists and again on a resume: the
    default placement must be the prepared folder's (start) at every stage, or a killed experiment's cells look
    stale (test_faults' random-moment kill found it); a JSONL corpus gets stride."""
    from goldfish.config import from_dict
    from goldfish.eval.config import EvalConfig
    from goldfish.ownership import MARKER

    def window(path):
        return from_dict(EvalConfig, {"model": {"path": "m"}, "data": {"path": str(path)}, "out": "o"}).data.window

    folder = tmp_path / "prepared"
    assert window(folder) == ["start"]  # not there yet
    folder.mkdir()
    (folder / MARKER).write_text("{}")
    assert window(folder) == ["start"]  # an unfinished prepare
    (folder / "manifest.json").write_text("{}")
    assert window(folder) == ["start"]  # finished
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"text": "a"}\n')
    texts = tmp_path / "texts"
    texts.mkdir()
    assert window(corpus) == ["stride"] and window(texts) == ["stride"]


def test_documents_shorter_than_the_window_are_answered_by_the_short_rule(tmp_path, capsys):
    """Issue 58: with the default P = 32, S = 50 (82 tokens), 20-74-token documents each get one window -- the last
    half of the document as the suffix, the rest as the prefix -- and a verdict; only documents under 16 tokens
    are unanswered, listed with their lengths."""
    tok = tiny_tokenizer()
    ids6 = tok(TEXTS[3][:30], add_special_tokens=False)["input_ids"]  # 20 tokens, no token twice in its last half
    succ: dict[int, int] = {}
    firsts = [ids6[len(ids6) - len(ids6) // 2 - 1 :]]
    for ids in firsts + [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS[:3]]:
        for a, b in zip(ids, ids[1:]):
            succ.setdefault(a, b)
    model = save_model_folder(tmp_path / "model", successor_model(len(tok), succ), tok)
    texts = TEXTS + [TEXTS[3][:30], "Hi.", "Call me", TEXTS[0] + " " + TEXTS[1]]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "audit"
    assert (
        main(
            [
                "eval",
                "--model",
                str(model),
                "--data",
                str(corpus),
                "--out",
                str(out),
                "progress=false",
                "decoding.batch_size=2",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    docs = {d["doc_id"]: d for d in res["documents"]}
    assert re.search(
        rf"extraction: {len(res['windows'])} windows to decode; the first \d+ took [\d.]+ s "
        r"\([\d.]+ windows/s\): about [\d.]+ (s|min|h) more",
        err,
    )  # the expected time, before the rest
    lengths = {f"d{i}": len(tok(t, add_special_tokens=False)["input_ids"]) for i, t in enumerate(texts)}
    for doc_id, n in lengths.items():
        got = docs[doc_id]
        if n >= 82:  # the default windows
            assert not got["short_window"] and got["n_windows"] > 1 and got["verdict"] != "too_short"
            continue
        if n < 16:
            assert got["verdict"] == "too_short" and got["n_windows"] == 0, doc_id
            continue
        ids = tok(texts[int(doc_id[1:])], add_special_tokens=False)["input_ids"]
        suffix = n // 2  # the rule by hand: the last half, at most S = 50 tokens
        token, run = ids[n - suffix - 1], 0
        for truth in ids[n - suffix :]:
            token = succ.get(token, 0)
            if token != truth:
                break
            run += 1
        assert got["short_window"] and got["n_windows"] == 1, doc_id
        assert (got["verdict"], got["longest_span"], got["longest_span_offset"]) == (
            "regurgitated" if run == suffix else "not_regurgitated",
            run,
            n - suffix,
        ), doc_id
        (w,) = [w for w in res["windows"] if w["doc_id"] == doc_id]
        assert (w["window"], w["prefix_tokens"], w["suffix_len"], len(w["generation_ids"])) == (
            "short",
            n - suffix,
            suffix,
            suffix,
        )
    assert docs["d6"]["verdict"] == "regurgitated"  # its second half memorised first: a short window's verdict
    assert "short" in res["summary"]["by_window"]  # reported as its own placement, never pooled
    fitted = sum(16 <= n < 82 for n in lengths.values())
    assert f"{fitted} of {len(texts)} documents are shorter than the requested windows (82 tokens" in err
    assert f"2 of {len(texts)} documents are too short for any window (fewer than 16 tokens" in err
    assert "d7 (3), d8 (5)" in err
    page = (out / "report.html").read_text()  # the page beside report.md: every document in its table
    assert all(f'"{doc_id}"' in page for doc_id in lengths) and "<script>alert" not in page
