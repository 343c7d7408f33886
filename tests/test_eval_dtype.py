"""Evaluation in the checkpoint's own dtype (issue 43): the default `model.dtype=checkpoint` reads the dtype the
checkpoint was saved in, records it, and gives every window the verdict and matched fraction of Hugging Face's
batch-1 greedy `generate()` in that dtype (the independent reference); a faster precision is one flag away and the
report says when verdicts may then differ."""

from __future__ import annotations

import json

import pytest
import torch

from goldfish import hardware, precision
from goldfish.cli import main
from goldfish.eval.generate import eos_disabled
from goldfish.eval.inputs import load_eval_documents
from goldfish.model_source import checkpoint_precision

from eval_fixtures import TEXTS, save_model_folder, tiny_llama, tiny_tokenizer, write_jsonl
from test_precision import EPYC

S, P = 12, 8


def test_checkpoint_precision_is_the_saved_dtype(tmp_path):
    tok = tiny_tokenizer()
    fp32 = save_model_folder(tmp_path / "fp32", tiny_llama(len(tok)), tok)
    bf16 = save_model_folder(tmp_path / "bf16", tiny_llama(len(tok)).to(torch.bfloat16), tok)
    assert checkpoint_precision(fp32) == "fp32" and checkpoint_precision(bf16) == "bf16"
    config = json.loads((bf16 / "config.json").read_text())
    for key in ("dtype", "torch_dtype"):
        config.pop(key, None)
    (bf16 / "config.json").write_text(json.dumps(config))
    assert checkpoint_precision(bf16) == "bf16"  # no dtype in config.json: the safetensors header's


def _hf_greedy(model, prefix: list[int]) -> list[int]:
    """Batch-1 ``model.generate`` greedy, exactly S new tokens, eos neither stopping nor banned."""
    with eos_disabled(model), torch.no_grad():
        out = model.generate(
            torch.tensor([prefix]),
            attention_mask=torch.ones(1, len(prefix), dtype=torch.long),
            do_sample=False,
            max_new_tokens=S,
            min_new_tokens=S,
            pad_token_id=0,
        )
    return out[0, len(prefix) :].tolist()


def char_tokenizer():
    """Byte-level, printable ASCII only, no merges: any sequence of its ordinary tokens decodes to text that encodes
    back to the same ids, so a model's own greedy output can be written as a document."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = [c for c in pre_tokenizers.ByteLevel.alphabet() if c.isascii() and c.isprintable()]
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + 1,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tok.train_from_iterator(TEXTS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """An fp32 checkpoint and documents: the model's own greedy continuations of each text's opening (so windows
    at their start are regurgitated) and the texts themselves."""
    root = tmp_path_factory.mktemp("dtype")
    tok = char_tokenizer()
    model = tiny_llama(len(tok), seed=5)
    folder = save_model_folder(root / "model", model, tok)
    own = []
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"][:P]
        ids += _hf_greedy(model, ids)
        ids += _hf_greedy(model, ids)
        text = tok.decode(ids)
        if tok(text, add_special_tokens=False)["input_ids"] == ids:  # eos (a special token) would not round-trip
            own.append(text)
    assert own
    docs = write_jsonl(root / "docs.jsonl", own + TEXTS)
    return root, folder, docs, model, tok


def _eval(root, folder, docs, name, *extra) -> dict:
    out = root / name
    assert (
        main(
            [
                "eval",
                "--model",
                str(folder),
                "--data",
                str(docs),
                "--out",
                str(out),
                "tasks=[extraction]",
                f"data.prefix_lens=[{P}]",
                f"data.suffix_len={S}",
                "data.window=[stride]",
                "data.stride=7",
                "report=true",
                *extra,
            ]
        )
        == 0
    )
    return json.loads((out / "results.json").read_text())


def test_eval_of_an_fp32_checkpoint_agrees_with_batch1_generate(corpus):
    root, folder, docs, model, tok = corpus
    results = _eval(root, folder, docs, "default")
    assert results["model"]["precision"] == "fp32" and results["model"]["checkpoint_precision"] == "fp32"
    assert results["model"]["dtype"] == "torch.float32"
    splits, _ = load_eval_documents(docs, None, tok)
    tokens = {d.id: list(d.tokens) for d in splits["members"]}
    windows = results["windows"]
    assert len(windows) >= 2 * len(TEXTS)
    for w in windows:
        ids = tokens[w["doc_id"]]
        prefix = ids[w["start"] : w["start"] + w["prefix_tokens"]]
        truth = ids[w["start"] + w["prefix_tokens"] :][:S]
        ref = _hf_greedy(model, prefix)
        assert w["exact_match"] == (ref == truth), w["doc_id"]
        assert w["token_match"] == pytest.approx(sum(a == b for a, b in zip(ref, truth)) / S, abs=1e-12)
    assert any(w["exact_match"] for w in windows) and not all(w["exact_match"] for w in windows)


def test_a_faster_precision_is_one_flag_away_and_the_report_says_so(corpus, monkeypatch):
    root, folder, docs, _, _ = corpus
    monkeypatch.setattr(hardware, "cpu_features", lambda: EPYC)  # a class where auto computes in bf16
    monkeypatch.setattr(precision, "_ANNOUNCED", set())
    results = _eval(root, folder, docs, "fast", "--dtype", "auto")
    assert results["model"]["precision"] == "bf16" and results["model"]["checkpoint_precision"] == "fp32"
    assert results["config"]["model"]["dtype"] == "bf16"  # the resolved name is what the fingerprint holds
    report = (root / "fast" / "report.md").read_text()
    assert "evaluated in bf16, not the checkpoint's own fp32" in report
    if not (root / "default" / "report.md").is_file():  # the test above wrote it, unless run alone or elsewhere
        _eval(root, folder, docs, "default")
    assert "evaluated in" not in (root / "default" / "report.md").read_text()
