"""`goldfish.GoldfishTrainer` (HF Trainer) and `GoldfishSFTTrainer` (TRL) on a real tiny HF Llama on CPU: the logged
kept loss, dropped loss and dropped fraction of every step equal a recomputation by `goldfish_loss` -- the step's
weights (saved when it began) applied to the micro-batches it trained on, the Goldfish mask computed here from the
unmasked labels -- summed over gradient accumulation; the Trainer's own loss equals the kept loss (transformers 5
normalises by the kept targets of the accumulated batch; 4.x by its labels before the shift); the TensorBoard event file
holds the same values."""

from __future__ import annotations

import copy

import pytest
import torch
from tolerances import llama_terms, rounding
from train_helpers import _tokenizer

from goldfish import GoldfishConfig, GoldfishTrainer, goldfish_loss, goldfish_mask

VOCAB, HIDDEN, LAYERS, INTER, SEQ = 64, 32, 2, 64, 48
ACCUMULATE, STEPS, BATCH = 2, 3, 2


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=2,
            intermediate_size=INTER,
            max_position_embeddings=128,
        )
    )


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok") / "tok"
    _tokenizer(VOCAB, folder)
    return AutoTokenizer.from_pretrained(folder)


def texts(n: int = BATCH * ACCUMULATE * STEPS) -> list[str]:
    rng = torch.Generator().manual_seed(0)
    return [
        " ".join(f"w{int(i)}" for i in torch.randint(3, VOCAB, (int(m),), generator=rng))
        for m in torch.randint(20, 40, (n,), generator=rng)
    ]


class Recorder:
    """Per optimizer step: the weights when it began, and the model inputs (ids, attention, the labels before the
    mask) of each of its micro-batches."""

    def __init__(self, model):
        from transformers import TrainerCallback

        self.steps: list[dict] = []
        recorder = self

        class Snapshot(TrainerCallback):
            def on_step_begin(self, args, state, control, model=None, **kwargs):
                recorder.steps.append({"weights": copy.deepcopy(model.state_dict()), "batches": []})

        self.callback = Snapshot()
        model.register_forward_pre_hook(self._batch, with_kwargs=True)

    def _batch(self, module, args, kwargs):
        if module.training:
            ids, attention = kwargs["input_ids"].clone(), kwargs["attention_mask"].clone()
            self.steps[-1]["batches"].append(
                {"input_ids": ids, "attention_mask": attention, "plain": ids.masked_fill(attention == 0, -100)}
            )


def step_sums(steps: list[dict], specials: list[int]) -> list[torch.Tensor]:
    """Per step (kept CE, kept targets, dropped CE, dropped targets): its weights on its micro-batches, the mask from
    goldfish_mask (hash of the 13 ids ending at each target), summed over the micro-batches."""
    model, out = tiny_llama(), []
    for step in steps:
        model.load_state_dict(step["weights"])
        model.eval()
        sums = torch.zeros(4, dtype=torch.float64)
        for b in step["batches"]:
            mask = goldfish_mask(b["plain"], k=4, h=13, special_ids=specials)
            with torch.no_grad():
                logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            o = goldfish_loss(logits, b["plain"], drop_mask=mask)
            sums += torch.tensor(
                [float(o.kept_sum), float(o.kept_count), float(o.dropped_sum), float(o.dropped_count)],
                dtype=torch.float64,
            )
        assert len(step["batches"]) == ACCUMULATE
        out.append(sums)
    return out


def label_counts(steps: list[dict], specials: list[int]) -> list[int]:
    """Per step, the labels left after the mask counted as transformers 4.x counts ``num_items_in_batch``: before
    the shift, so each row's first label (never a target) counts too."""
    out = []
    for step in steps:
        out.append(
            sum(
                int(
                    (
                        b["plain"].masked_fill(goldfish_mask(b["plain"], k=4, h=13, special_ids=specials), -100) != -100
                    ).sum()
                )
                for b in step["batches"]
            )
        )
    return out


def logged_values(sums: torch.Tensor) -> dict:
    return {
        "kept_loss": float(sums[0] / sums[1]),
        "dropped_loss": float(sums[2] / sums[3]),
        "dropped_frac": float(sums[3] / (sums[1] + sums[3])),
    }


# a logged loss accumulates the CE of every token of ACCUMULATE x BATCH rows through the forward path, in another
# order (batched training forward vs this recomputation)
TOL = rounding(llama_terms(HIDDEN, INTER, LAYERS, HIDDEN // 2, SEQ, VOCAB) + ACCUMULATE * BATCH * SEQ)


def check_logs(trainer, recorder, specials: list[int], output_dir) -> None:
    logged = [e for e in trainer.state.log_history if "kept_loss" in e]
    assert [e["step"] for e in logged] == list(range(1, STEPS + 1))
    import transformers

    sums = step_sums(recorder.steps, specials)
    expected = [logged_values(s) for s in sums]

    # the Trainer's own loss over an accumulated step is the step's kept CE over num_items_in_batch: transformers 5
    # counts the kept targets, so it is the kept loss; 4.x (4.56, the declared floor) counts the labels before the
    # shift, one more per row (transformers logs it rounded to 4 decimals)
    if int(transformers.__version__.split(".")[0]) >= 5:
        trainer_loss = [e["kept_loss"] for e in expected]
    else:
        trainer_loss = [float(s[0]) / n for s, n in zip(sums, label_counts(recorder.steps, specials))]
    for got, want, loss in zip(logged, expected, trainer_loss):
        for key in ("kept_loss", "dropped_loss", "dropped_frac"):
            assert got[key] == pytest.approx(want[key], rel=TOL), (key, got, want)
        assert got["loss"] == pytest.approx(loss, rel=TOL, abs=5e-5), (got, loss)
        assert 0.1 < got["dropped_frac"] < 0.4  # about 1/k
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (event_file,) = output_dir.rglob("events.out.tfevents.*")  # <output_dir>/runs/<date>/, the Trainer's default
    events = EventAccumulator(str(event_file))
    events.Reload()
    for key in ("kept_loss", "dropped_loss", "dropped_frac"):
        scalars = events.Scalars(f"train/{key}")
        assert [s.step for s in scalars] == [e["step"] for e in logged]
        # TensorBoard stores float32: one rounding of each value
        assert [s.value for s in scalars] == pytest.approx([e[key] for e in logged], rel=2**-23)


def test_hf_trainer_logs_what_goldfish_drops(tokenizer, tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, TrainingArguments

    rows = Dataset.from_dict({"text": texts()}).map(lambda r: tokenizer(r["text"]), remove_columns=["text"])
    model = tiny_llama()
    recorder = Recorder(model)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE,
        learning_rate=5e-3,
        logging_steps=1,
        report_to=["tensorboard"],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        data_seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GoldfishTrainer(
        model=model,
        args=args,
        train_dataset=rows,
        processing_class=tokenizer,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        goldfish=GoldfishConfig(k=4, h=13),
        callbacks=[recorder.callback],
    )
    trainer.train()
    check_logs(trainer, recorder, sorted(tokenizer.all_special_ids), tmp_path / "out")


def test_a_log_over_several_steps_weights_every_token_once(tokenizer, tmp_path):
    """logging_steps=3: one record, the token-weighted means over the 3 steps x 2 micro-batches."""
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, TrainingArguments

    rows = Dataset.from_dict({"text": texts()}).map(lambda r: tokenizer(r["text"]), remove_columns=["text"])
    model = tiny_llama()
    recorder = Recorder(model)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE,
        learning_rate=5e-3,
        logging_steps=STEPS,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        data_seed=0,
        disable_tqdm=True,
    )
    trainer = GoldfishTrainer(
        model=model,
        args=args,
        train_dataset=rows,
        processing_class=tokenizer,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        goldfish=GoldfishConfig(k=4, h=13),
        callbacks=[recorder.callback],
    )
    trainer.train()
    (logged,) = [e for e in trainer.state.log_history if "kept_loss" in e]
    want = logged_values(sum(step_sums(recorder.steps, sorted(tokenizer.all_special_ids))))
    for key, value in want.items():
        assert logged[key] == pytest.approx(value, rel=TOL), key


def test_trl_sft_trainer_logs_what_goldfish_drops(tokenizer, tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import SFTConfig

    from goldfish import GoldfishSFTTrainer

    model = tiny_llama()
    recorder = Recorder(model)
    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE,
        learning_rate=5e-3,
        logging_steps=1,
        bf16=False,
        report_to=["tensorboard"],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        data_seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GoldfishSFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"text": texts()}),
        processing_class=tokenizer,
        goldfish=GoldfishConfig(k=4, h=13),
        callbacks=[recorder.callback],
    )
    trainer.train()
    check_logs(trainer, recorder, sorted(tokenizer.all_special_ids), tmp_path / "out")


def test_evaluation_logs_pass_unchanged_and_the_model_never_sees_the_unmasked_labels(tokenizer, tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, TrainingArguments

    rows = Dataset.from_dict({"text": texts(4)}).map(lambda r: tokenizer(r["text"]), remove_columns=["text"])
    seen: list[set] = []
    model = tiny_llama()
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(set(kw)), with_kwargs=True)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = GoldfishTrainer(
        model=model,
        args=args,
        train_dataset=rows,
        eval_dataset=rows,
        processing_class=tokenizer,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        goldfish=GoldfishConfig(k=4, h=13),
    )
    trainer.train()
    metrics = trainer.evaluate()
    assert "eval_loss" in metrics and not any(k in metrics for k in ("eval_kept_loss", "kept_loss"))
    assert seen and all("goldfish_unmasked_labels" not in keys for keys in seen)
