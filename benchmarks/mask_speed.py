"""Mask speed, and the cost of Goldfish in a training step (ratios measured side by side in one run).

    python benchmarks/mask_speed.py [--steps 20]

Reports: mask time for [8, 256] and [64, 2048] int64 batches on CPU; and the step time of a ~10 M-parameter Llama
(batch 8 x 256) with the Goldfish loss (mask computed inside the step) vs the standard loss. Target: <= 1.01x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from goldfish import GoldfishConfig, goldfish_loss, goldfish_mask


def _time(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def mask_times() -> dict:
    from goldfish.data import load_tokenizer
    from goldfish.fold import token_fold

    fold = token_fold(load_tokenizer("gpt2"))  # the canonical strategy's table, built once (not timed)
    out = {}
    for shape in [(8, 256), (64, 2048)]:
        ids = torch.randint(0, 50_257, shape)
        for strategy in ("hash", "hash-table", "canonical", "static"):
            out[f"{strategy} {shape[0]}x{shape[1]} ms"] = 1e3 * _time(
                lambda: goldfish_mask(ids, 4, 13, strategy, fold=fold), 20
            )
    return out


def step_ratio(steps: int) -> dict:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=4096,
        hidden_size=320,
        intermediate_size=864,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 4096, (8, 256))
    gcfg = GoldfishConfig(k=4, h=13)

    def step(goldfish: bool) -> None:
        logits = model(input_ids=ids).logits
        out = goldfish_loss(logits, ids, gcfg if goldfish else None)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    # interleave the two arms so machine noise hits both alike
    std, gf = [], []
    step(False), step(True)
    for _ in range(steps):
        for arm, bucket in ((False, std), (True, gf)):
            t = time.perf_counter()
            step(arm)
            bucket.append(time.perf_counter() - t)
    s, g = statistics.median(std), statistics.median(gf)
    return {"params_M": n_params / 1e6, "standard_step_s": s, "goldfish_step_s": g, "goldfish_over_standard": g / s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    result = {"mask": mask_times(), "step": step_ratio(args.steps), "threads": torch.get_num_threads()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
