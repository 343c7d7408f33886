"""report.html: built from results.json alone, every text escaped, and -- in a real headless Chromium -- the
highlighted spans are the verdicts of results.json, a document holding markup shows it as text and runs nothing,
and a click on a column's header sorts the table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser import Browser, chromium_path
from goldfish.eval.documents import document_verdicts
from goldfish.eval.html_page import embed_json, markdown_html
from goldfish.eval.html_report import render_html, write_html
from goldfish.eval.segments import document_segments
from goldfish.eval.windows import EvalDocument

XSS = ["<script>alert(1)</script>", ' <img src=x onerror="window.__pwned=1">', " &amp; </textarea>"]
VOCAB = [f" w{i}" for i in range(60)] + XSS  # token id -> its text


TOKENS: dict[str, tuple] = {}  # each document's tokens, for the text a mark must show


def decode(ids) -> str:
    return "".join(VOCAB[i] for i in ids)


def _window(doc: EvalDocument, start: int, p: int, s: int, reproduced: int) -> dict:
    truth = list(doc.tokens[start + p : start + p + s])
    gen = truth[:reproduced] + [(t + 1) % 60 for t in truth[reproduced:]]
    return {
        "doc_id": doc.id,
        "title": doc.title,
        "split": doc.split,
        "repetitions": None,
        "group": None,
        "prefix_len": p,
        "prefix_tokens": p,
        "suffix_len": s,
        "window": "stride",
        "start": start,
        "exact_match": reproduced == s,
        "longest_match_prefix": reproduced,
        "token_match": reproduced / s,
        "onepass_token_acc": reproduced / s,
        "onepass_hits": "1" * reproduced + "0" * (s - reproduced),
        "rouge_l_paper": reproduced / s,
        "truth": decode(truth),
        "generation": decode(gen),
        "truth_ids": truth,
        "generation_ids": gen,
    }


def small_results() -> dict:
    """Four documents, P = S = 8: d-long (two verbatim windows in a row, then 3 tokens), d-xss (markup in its text,
    2 tokens reproduced), d-non (a nonmember, nothing), d-short (5 tokens: no window)."""
    docs = [
        EvalDocument("d-long", tuple(range(40)), "Long one"),
        EvalDocument("d-xss", (0, 1, 2, 60, 3, 4, 5, 6, 61, 7, 62, 8, 9, 10, 11, 12), "<b>bold</b> title"),
        EvalDocument("d-non", tuple(range(20, 44)), "Held out", split="nonmembers"),
        EvalDocument("d-short", (1, 2, 3, 4, 5), "Short"),
    ]
    TOKENS.update((d.id, d.tokens) for d in docs)
    plan = {"d-long": [8, 8, 3, 0], "d-xss": [2], "d-non": [0, 1]}
    windows = [_window(d, 8 * i, 8, 8, r) for d in docs for i, r in enumerate(plan.get(d.id, []))]
    documents = document_verdicts(docs, windows, [8], 8)
    for record, doc in zip(documents, docs):
        record["segments"] = document_segments(doc.tokens, [w for w in windows if w["doc_id"] == doc.id], decode)
    attack = {
        "auc": 0.75,
        "auc_ci_low": 0.5,
        "auc_ci_high": 1.0,
        "tpr_at_1pct_fpr": 0.5,
        "n_members": 2,
        "n_nonmembers": 1,
        "tpr_at_1pct_fpr_note": None,
    }
    return {
        "schema": "goldfish-eval/1",
        "code": "0.1+git.abc",
        "created": "2026-01-01T00:00:00+00:00",
        "model": {
            "path": "runs/x/model",
            "revision": None,
            "precision": "fp32",
            "weights": [["model.safetensors", 1234, "ef" * 32]],
            "device": {"type": "cpu", "name": "test cpu"},
        },
        "data": {
            "path": "docs.jsonl",
            "members": 3,
            "nonmembers": 1,
            "sha256": "ab" * 32,
            "documents_sha256": "cd" * 32,
        },
        "config": {"data": {"prefix_lens": [8], "suffix_len": 8, "window": ["stride"]}},
        "documents": documents,
        "windows": windows,
        "membership": {
            "n_members": 2,
            "n_nonmembers": 1,
            "attacks": {"loss": attack},
            "scores": {"loss": {"members": [-1.5, -2.5], "nonmembers": [-3.0]}},
            "doc_ids": {"members": ["d-long", "d-xss"], "nonmembers": ["d-non"]},
        },
    }


def test_segments_cut_the_document_where_its_verdicts_change():
    tokens = list(range(20))
    windows = [
        {"start": 0, "prefix_tokens": 4, "suffix_len": 4, "longest_match_prefix": 4},
        {"start": 4, "prefix_tokens": 4, "suffix_len": 4, "longest_match_prefix": 1},
        {"start": 12, "prefix_tokens": 4, "suffix_len": 4, "longest_match_prefix": 0},
    ]
    segs = document_segments(tokens, windows, decode)
    # prompt 0-4, reproduced 4-9 (4 + 1 joined), evaluated 9-12, prompt-only gap 12-16, evaluated 16-20
    assert [s[:3] for s in segs] == [[0, 4, "p"], [4, 9, "r"], [9, 12, "s"], [12, 16, "p"], [16, 20, "s"]]
    assert "".join(s[3] for s in segs) == decode(tokens)


def test_the_accuracy_profile_is_per_token_where_the_results_hold_it():
    from goldfish.eval.html_report import profile

    w = {
        "start": 0,
        "prefix_tokens": 4,
        "suffix_len": 12,
        "longest_match_prefix": 4,
        "exact_match": False,
        "onepass_token_acc": 8 / 12,
        "onepass_hits": "111100001111",
    }  # suffix tokens 4-15
    # bars of 8 document tokens: 4-7 all right and reproduced, 8-15 half right (a local passage, hidden in the mean)
    assert profile([w]) == [[4, 8, 1.0, True], [8, 16, 0.5, False]]
    w2 = dict(w, start=8, longest_match_prefix=0, onepass_hits="0" * 12)  # tokens 12-23: 12-15 scored twice
    assert profile([w, w2]) == [[4, 8, 1.0, True], [8, 16, 0.5, False], [16, 24, 0.0, False]]  # the first's hits
    assert profile([w2, w])[1] == [8, 16, 0.0, False]
    older = {k: v for k, v in w.items() if k != "onepass_hits"}  # results without hits: one bar per window
    assert profile([older]) == [[4, 16, 8 / 12, False]]


def test_page_is_a_pure_function_of_the_results_and_escapes_every_text(tmp_path):
    results = small_results()
    html = render_html(results)
    assert html == render_html(json.loads(json.dumps(results)))  # from results.json alone
    for text in XSS + ["<b>bold</b>"]:
        assert text not in html  # only escaped copies reach the file
    island = re.search(r'<script type="application/json" id="gf-data">(.*?)</script>', html, re.DOTALL).group(1)
    assert "<" not in island and ">" not in island
    data = json.loads(island)
    assert {r[0] for r in data["rows"]} == {"d-long", "d-xss", "d-non", "d-short"}
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html  # offline
    assert "1 of 3 member documents regurgitated (1 too short for any window)" in html  # members counted apart
    assert "0 of 1 nonmember documents regurgitated" in html
    unextracted = dict(results, documents=[d for d in results["documents"] if d["split"] == "members"])
    assert "1 nonmember documents: scored for membership, not extracted" in render_html(unextracted)
    assert f"model.safetensors (1234 B, sha256 {'ef' * 32})" in html  # the weights by content (provenance)
    assert write_html(results, tmp_path).read_text() == html


def test_embedded_json_cannot_close_its_script_element():
    text = embed_json({"t": "</script><script>alert(1)</script>&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"t": "</script><script>alert(1)</script>&"}


def test_markdown_sections_are_escaped():
    out = markdown_html("# Title <x>\n\n| a | b |\n|---|---|\n| <script> | **x** |\n\n- item `<y>`\n")
    assert "<script>" not in out and "&lt;script&gt;" in out and "<b>x</b>" in out and "<code>&lt;y&gt;</code>" in out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for b, e in sorted(spans):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return [tuple(x) for x in out]


@pytest.mark.integration
def test_report_html_in_a_real_browser(tmp_path):
    if chromium_path() is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the browser test cannot run here")
    results = small_results()
    path = write_html(results, tmp_path)
    with Browser(tmp_path / "profile") as b:  # pytest removes it later: Chromium's helpers may still write there
        b.open(path.as_uri())
        assert b.evaluate("document.querySelectorAll('#docs tbody tr.doc').length") == 4
        headline = b.evaluate("document.getElementById('headline').getBoundingClientRect().bottom")
        assert headline < 900  # the headline fits the first screen
        for d in results["documents"]:
            b.click(f"#docs tr.doc[data-doc='{d['doc_id']}']")
            marks = b.evaluate(
                "[...document.querySelectorAll('tr.detail mark')].map(m => "
                "[+m.dataset.start, +m.dataset.end, m.textContent])"
            )
            text = b.evaluate("document.querySelector('tr.detail .doctext').textContent")
            runs = [
                (w["start"] + w["prefix_tokens"], w["start"] + w["prefix_tokens"] + w["longest_match_prefix"])
                for w in results["windows"]
                if w["doc_id"] == d["doc_id"] and w["longest_match_prefix"]
            ]
            assert _merged([(s, e) for s, e, _ in marks]) == _merged(runs)  # highlighted = reproduced tokens
            longest = max(_merged([(s, e) for s, e, _ in marks]), key=lambda r: (r[1] - r[0], -r[0]), default=None)
            if d["verdict"] != "too_short":
                assert (longest[1] - longest[0] if longest else 0) == d["longest_span"]
                if longest:
                    assert longest[0] == d["longest_span_offset"]
            assert [m[2] for m in marks] == [decode(TOKENS[d["doc_id"]][s:e]) for s, e, _ in marks]
            doc_text = "".join(s[3] for s in d["segments"])
            assert text == doc_text  # the whole document, shown as text
            b.click(f"#docs tr.doc[data-doc='{d['doc_id']}']")  # closes it again
        b.click("#docs tr.doc[data-doc='d-xss']")
        shown = b.evaluate("document.querySelector('tr.detail').textContent")
        assert XSS[0] in shown and XSS[1].strip() in shown  # markup shown as text
        assert b.evaluate("typeof window.__pwned") == "undefined"
        assert b.evaluate("document.querySelectorAll('#docs img, #docs script').length") == 0
        assert not [e for e in b.events if e.get("method") == "Page.javascriptDialogOpening"]
        assert (
            b.evaluate("document.querySelector('#docs tr.doc[data-doc=\"d-xss\"] td:nth-child(2)').textContent")
            == "<b>bold</b> title"
        )
        b.screenshot(tmp_path / "page.png")
        assert (tmp_path / "page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        b.click("#docs th[data-key='longest_span']")  # numbers: largest first, missing last
        order = b.evaluate("[...document.querySelectorAll('#docs tbody tr.doc')].map(r => r.dataset.doc)")
        spans = {d["doc_id"]: d["longest_span"] for d in results["documents"]}
        assert order == sorted(spans, key=lambda k: (spans[k] is None, -(spans[k] or 0), k))
        b.click("#docs th[data-key='longest_span']")  # again: smallest first
        order = b.evaluate("[...document.querySelectorAll('#docs tbody tr.doc')].map(r => r.dataset.doc)")
        assert order == sorted(spans, key=lambda k: (spans[k] is None, spans[k] or 0, k))
        b.click("#docs th[data-key='doc_id']")
        order = b.evaluate("[...document.querySelectorAll('#docs tbody tr.doc')].map(r => r.dataset.doc)")
        assert order == sorted(spans)


def test_study_page_from_the_committed_demo_results():
    from goldfish.experiment.html_report import render_html as study_html

    results = json.loads((Path(__file__).parents[1] / "experiments/results/default/results.json").read_text())
    html = study_html(results)
    assert html == study_html(json.loads(json.dumps(results)))  # from results.json alone
    headline = html.split('<section id="headline">', 1)[1].split("</section>", 1)[0]
    for cell in results["cells"]:  # one headline row per cell, with its own attack
        assert f"<tr><td>{cell['cell']}</td><td>{cell['arm']}</td><td>{cell['mia_attack']}</td>" in headline
    island = re.search(r'<script type="application/json" id="gf-data">(.*?)</script>', html, re.DOTALL).group(1)
    rows = json.loads(island)["rows"]
    assert len(rows) == sum(len(e["windows"]) for e in results["examples"])
    hostile = dict(
        results,
        description="<script>alert(1)</script>",
        examples=[
            dict(
                results["examples"][0],
                arm="a<b>",
                windows=[
                    dict(
                        results["examples"][0]["windows"][0],
                        doc_id="<img src=x onerror=alert(1)>",
                        truth="</script>",
                        title="<b>t</b>",
                    )
                ],
            )
        ],
    )
    out = study_html(hostile)
    assert "<script>alert(1)" not in out and "<img src=x" not in out and "a<b>" not in out and "<b>t</b>" not in out


@pytest.mark.integration
def test_report_html_pages_and_filters_a_large_table(tmp_path):
    if chromium_path() is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the browser test cannot run here")
    docs = [
        EvalDocument(
            f"doc-{i:03d}",
            tuple((i + j) % 60 for j in range(24)),
            f"Title {i}",
            split="members" if i % 5 else "nonmembers",
        )
        for i in range(250)
    ]
    windows = [_window(d, 0, 8, 8, i % 9) for i, d in enumerate(docs)]
    results = {
        "model": {"path": "m"},
        "data": {"members": 200, "nonmembers": 50},
        "documents": document_verdicts(docs, windows, [8], 8),
        "windows": windows,
    }
    path = write_html(results, tmp_path)
    shown = "[...document.querySelectorAll('#docs tbody tr.doc')].map(r => r.dataset.doc)"
    with Browser(tmp_path / "profile") as b:  # pytest removes it later: Chromium's helpers may still write there
        b.open(path.as_uri())
        first = b.evaluate(shown)
        assert first == [d.id for d in docs[:100]]  # 100 rows a page, in the results' order
        assert b.evaluate("document.getElementById('pageinfo').textContent") == "250 of 250 documents; page 1 of 3"
        b.click("#next")
        b.click("#next")
        assert b.evaluate(shown) == [d.id for d in docs[200:]]
        b.evaluate(
            "(s => { s.value = 'nonmembers'; s.dispatchEvent(new Event('change')); })"
            "(document.querySelector(\"select[data-key='split']\"))"
        )
        assert b.evaluate(shown) == [d.id for d in docs if d.split == "nonmembers"]  # 50: one page, from the first
        b.evaluate("(q => { q.value = 'doc-02'; q.dispatchEvent(new Event('input')); })(document.getElementById('q'))")
        assert b.evaluate(shown) == ["doc-020", "doc-025"]  # id filter and split filter together
