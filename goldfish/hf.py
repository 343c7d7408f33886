"""Goldfish Loss inside Hugging Face's ``Trainer`` and TRL's ``SFTTrainer``, with the diagnostics the toolkit's own
trainer logs: kept loss, dropped loss and the dropped fraction, through the Trainer's own logging (so TensorBoard,
W&B, ``trainer_state.json`` and every other ``report_to`` integration get them)::

    from goldfish import GoldfishConfig, GoldfishTrainer
    trainer = GoldfishTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer,
                              data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                              goldfish=GoldfishConfig(k=4, h=13))
    trainer.train()          # logs loss, kept_loss, dropped_loss, dropped_frac every logging_steps

    from goldfish.hf import GoldfishSFTTrainer   # the same on trl.SFTTrainer (needs trl)

How: :class:`GoldfishTrainerMixin` wraps the trainer's data collator (whatever it is: the one you pass, or the one
TRL builds, padding-free and packed included) in :class:`goldfish.GoldfishCollator` after the trainer is built, so
the labels the model trains on have the dropped targets set to -100 -- the seam every HF loss honours -- and the
Trainer's own normalisation counts the *kept* targets of the whole gradient-accumulation batch (across processes
too, with ``average_tokens_across_devices``): exactly the Goldfish loss of ``goldfish train``. The collator also
hands over the unmasked labels (:data:`UNMASKED`), which ``compute_loss`` removes before the forward pass and uses for
the statistics: the cross-entropy sums and counts of the kept and the dropped targets (:func:`goldfish.goldfish_loss`
on the backbone's last hidden states, captured by a forward hook, through the output head in chunks, no gradient --
TRL's fused head computes no logits for the targets the mask dropped), summed over every micro-batch (and process)
between two logging steps, so the logged values are token-weighted means over the interval, whatever the
accumulation. The cost: one more output-head projection per step, without its backward.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Trainer

from .collator import UNMASKED, GoldfishCollator
from .loss import goldfish_loss
from .masks import IGNORE_INDEX, GoldfishConfig

LOGGED = ("kept_loss", "dropped_loss", "dropped_frac")  # the names goldfish train logs (metrics.jsonl, TensorBoard)
CHUNK_TOKENS = 1024  # positions per output-head chunk of the statistics: at most 1024 x vocabulary logits at a time


def _last_hidden(output) -> torch.Tensor:
    """The last hidden states of a backbone's output (a ``BaseModelOutput`` or a tuple), detached."""
    hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
    return hidden.detach()


class GoldfishTrainerMixin:
    """Goldfish Loss and its diagnostics for a ``transformers.Trainer`` subclass: put it first,
    ``class MyTrainer(GoldfishTrainerMixin, SomeTrainer)``. Takes ``goldfish=GoldfishConfig(...)``; the trainer's
    ``processing_class`` (its tokenizer) adds its special ids, and the fold table of ``strategy="canonical"``."""

    def __init__(self, *args: Any, goldfish: GoldfishConfig, **kwargs: Any):
        super().__init__(*args, **kwargs)
        tokenizer = getattr(self, "processing_class", None) or getattr(self, "tokenizer", None)
        self.data_collator = GoldfishCollator(self.data_collator, goldfish, tokenizer, keep_unmasked=True)
        self.goldfish = self.data_collator.config
        self._goldfish_sums = torch.zeros(4, dtype=torch.float64)  # kept CE, kept targets, dropped CE, dropped

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        unmasked, labels = inputs.pop(UNMASKED, None), inputs.get("labels")  # a label smoother pops the labels
        core = self.accelerator.unwrap_model(model)
        hidden: list[torch.Tensor] = []  # the backbone's last hidden states (B, T, H): what the output head reads
        counting = unmasked is not None and labels is not None and model.training and core.base_model is not core
        hook = (
            core.base_model.register_forward_hook(lambda m, a, out: hidden.append(_last_hidden(out)))
            if counting
            else None
        )
        try:  # outputs only when the caller asks (TRL's fused head would run another forward for them)
            result = super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        finally:
            if hook is not None:
                hook.remove()
        if hidden:
            self._goldfish_count(hidden[-1], core.get_output_embeddings(), unmasked, labels)
        return result

    def _goldfish_count(
        self, hidden: torch.Tensor, head: torch.nn.Module, unmasked: torch.Tensor, labels: torch.Tensor
    ) -> None:
        """Add this micro-batch's kept / dropped CE sums and counts: the output head applied to ``hidden`` in chunks
        (TRL's fused head computes no logits for dropped targets, so none are reused), without gradient."""
        with torch.no_grad():
            dropped = (unmasked != IGNORE_INDEX) & (labels == IGNORE_INDEX)  # (B, T): what the mask removed
            out = goldfish_loss(
                hidden,
                unmasked.to(hidden.device),
                drop_mask=dropped.to(hidden.device),
                head=head,
                chunk_tokens=CHUNK_TOKENS,
            )
        sums = torch.stack([out.kept_sum, out.kept_count, out.dropped_sum, out.dropped_count])
        self._goldfish_sums += sums.to("cpu", torch.float64)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Add kept loss, dropped loss and the dropped fraction since the last training log (summed over every
        process) to a training log record; evaluation records pass unchanged."""
        if "loss" in logs and not any(k.startswith("eval_") for k in logs):
            sums = self._goldfish_sums.to(self.accelerator.device)
            if self.accelerator.num_processes > 1:
                sums = self.accelerator.reduce(sums, reduction="sum")
            kept, n_kept, dropped, n_dropped = sums.tolist()
            values = (
                kept / n_kept if n_kept else None,
                dropped / n_dropped if n_dropped else None,
                n_dropped / (n_kept + n_dropped) if n_kept + n_dropped else None,
            )
            logs = {**logs, **{k: v for k, v in zip(LOGGED, values) if v is not None}}
            self._goldfish_sums.zero_()
        super().log(logs, *args, **kwargs)


class GoldfishTrainer(GoldfishTrainerMixin, Trainer):
    """``transformers.Trainer`` with Goldfish Loss: ``GoldfishTrainer(..., goldfish=GoldfishConfig(k=4, h=13))``."""


def __getattr__(name: str):
    """``GoldfishSFTTrainer``: ``trl.SFTTrainer`` with Goldfish Loss, defined when first asked for (trl is an optional
    extra, imported only then)."""
    if name != "GoldfishSFTTrainer":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from trl import SFTTrainer

    class GoldfishSFTTrainer(GoldfishTrainerMixin, SFTTrainer):
        """``trl.SFTTrainer`` with Goldfish Loss: ``GoldfishSFTTrainer(..., goldfish=GoldfishConfig(k=4, h=13))``."""

    GoldfishSFTTrainer.__qualname__ = name
    globals()[name] = GoldfishSFTTrainer
    return GoldfishSFTTrainer
