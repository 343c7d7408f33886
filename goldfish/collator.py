"""``GoldfishCollator``: the reuse seam for any Hugging Face trainer.

Wraps any data collator (``DataCollatorForLanguageModeling``, ``DataCollatorWithPadding``, your own ...) and sets the
labels of dropped target tokens to -100, which every Hugging Face model and ``Trainer`` already skips::

    collator = GoldfishCollator(DataCollatorForLanguageModeling(tok, mlm=False), GoldfishConfig(k=4, h=13), tok)
    Trainer(model=model, args=args, train_dataset=ds, data_collator=collator).train()

:class:`goldfish.GoldfishTrainer` (``goldfish.hf``) wraps the trainer's collator this way itself and logs the kept and
dropped loss, from the unmasked labels this collator adds under :data:`UNMASKED` when asked (``keep_unmasked``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from .errors import ConfigError
from .fold import token_fold
from .masks import IGNORE_INDEX, GoldfishConfig, apply_goldfish

UNMASKED = "goldfish_unmasked_labels"  # with keep_unmasked: the batch's labels before the mask


class GoldfishCollator:
    """Apply a Goldfish mask to the ``labels`` produced by ``base`` (or to ``input_ids`` if there are no labels).

    ``tokenizer`` (optional) adds its special ids (BOS/EOS/pad ...) to ``config.special_ids``, and for the
    ``canonical`` strategy provides the fold table (unless ``config.fold`` is already set). Batches that carry
    ``document_ids`` or ``position_ids`` (packed rows) get document-aware masks. ``keep_unmasked`` adds the labels
    before the mask under :data:`UNMASKED` (what :class:`goldfish.GoldfishTrainer` measures the dropped loss on; a
    plain model's forward does not accept it). A positive control's ``supervised_fraction`` applies as in ``goldfish
    train``; the no-leak twin (``replace_dropped``) is refused.
    """

    def __init__(
        self, base: Callable[[list], dict], config: GoldfishConfig, tokenizer: Any = None, keep_unmasked: bool = False
    ):
        if config.replace_dropped:
            raise ConfigError(
                "replace_dropped=true (the leakage audit's no-leak twin) is supported by `goldfish "
                "train` only: GoldfishCollator and GoldfishTrainer leave the model's input ids as "
                "they are, so the model would still see the dropped tokens"
            )
        self.base = base
        self.keep_unmasked = keep_unmasked
        specials = set(config.special_ids)
        fold = config.fold
        if tokenizer is not None:
            specials |= {int(i) for i in getattr(tokenizer, "all_special_ids", []) if i is not None}
            if config.strategy == "canonical" and fold is None:
                fold = token_fold(tokenizer)
        self.config = dataclasses.replace(config, special_ids=sorted(specials), fold=fold)

    def __call__(self, features: list) -> dict:
        batch = self.base(features)
        labels = batch.get("labels")
        if labels is None:
            labels = torch.as_tensor(batch["input_ids"]).clone()
            if "attention_mask" in batch:
                labels = labels.masked_fill(torch.as_tensor(batch["attention_mask"]) == 0, IGNORE_INDEX)
        if self.keep_unmasked:
            batch[UNMASKED] = torch.as_tensor(labels).clone()
        batch["labels"] = apply_goldfish(
            labels, self.config, document_ids=batch.get("document_ids"), position_ids=batch.get("position_ids")
        )
        return batch
