"""Synthetic engine inputs shared by the engine benchmarks (random ids, Goldfish drop masks of the default config)."""

from __future__ import annotations

import torch

from goldfish.masks import GoldfishConfig, config_mask


def goldfish_batches(n: int, rows: int, seq: int, vocab: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``n`` micro-batches of (rows, seq) random ids with labels and the k=4, h=13 drop mask, seeded."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (rows, seq), generator=g)
        out.append({"input_ids": ids, "labels": ids.clone(), "drop_mask": config_mask(ids, GoldfishConfig())})
    return out
