"""``EvalConfig``: every setting of ``goldfish eval`` (defaults < YAML < flags / ``key=value`` overrides).

``model``, ``data`` and ``out`` may stay unset in a YAML file (an experiment fills them per cell); :func:`eval.run_eval`
checks them before doing any work.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Union

from goldfish.config import check, option, raise_problems

from .windows import ALL, PLACEMENTS


def parse_prefix_len(value) -> int | None:
    """``32`` -> 32, ``"all"``/``-1`` -> -1 (all but the last S tokens); None when invalid."""
    if isinstance(value, str):
        value = value.strip().lower()
        if value == "all":
            return ALL
        try:
            value = int(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != ALL):
        return None
    return value


@dataclasses.dataclass
class EvalConfig:
    """What to evaluate, how to cut extraction windows, and how to run the model."""

    model: Union[str, None] = option(None, "model to evaluate: a local Hugging Face folder, a .gguf file, or a "
                                           "training run folder (its model/ is used)")
    data: Union[str, None] = option(None, "documents: a prepared folder (goldfish prepare; its members split) or a "
                                          "JSONL file with one {\"id\", \"text\"} object per line")
    out: Union[str, None] = option(None, "output folder for results.json, results.csv, report.md and plots")
    nonmembers: Union[str, None] = option(None, "nonmember documents for membership inference (prepared folder or "
                                                "JSONL); default: the data folder's nonmembers split, if any")
    reference: Union[str, None] = option(None, "reference model for the reference-calibrated membership attack")
    prefix_lens: list[Union[int, str]] = option(factory=lambda: [32], help="prefix lengths P in tokens; 'all' or "
                                                "-1 = all but the last suffix_len tokens of each document")
    suffix_len: int = option(50, "suffix length S: tokens generated and compared with the true continuation")
    window: list[Literal["end", "start", "stride"]] = option(
        factory=lambda: ["end"], help="where windows sit: end (suffix = last S tokens), start (prefix at token 0), "
                                      "stride (every `stride` tokens); a list evaluates several placements")
    stride: Union[int, None] = option(None, "step between stride windows in tokens (default: suffix_len)")
    batch_size: Union[int, str] = option("auto", "windows per batch, or 'auto' (memory estimate on GPU, halved on "
                                                 "out-of-memory; 32 on CPU)")
    max_docs: Union[int, None] = option(None, "evaluate only the first N documents of each split")
    beam: int = option(1, "beam width; > 1 adds a beam-search extraction (beam_exact_match) next to greedy")
    samples: int = option(0, "sampled extraction: draw this many temperature samples per window and count exact "
                             "reproductions (0 = off)")
    temperature: float = option(1.0, "sampling temperature for `samples`")
    n_samples_adversary: int = option(100, "n of the (n, p)-extraction chance 1-(1-p_suffix)^n")
    membership: bool = option(True, "run membership inference when nonmembers are available")
    min_k_ratios: list[float] = option(factory=lambda: [0.2], help="Min-K% / Min-K%++ ratios (0 < k <= 1)")
    n_bootstrap: int = option(1000, "bootstrap resamples for the AUC confidence intervals")
    extract_splits: list[str] = option(factory=lambda: ["members"], help="splits whose documents get extraction "
                                       "windows (add 'nonmembers' for a never-trained control)")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = option("float32", "model weights dtype")
    device: str = option("auto", "torch device: auto (cuda if available, else cpu), cpu, cuda, cuda:1, mps")
    allow_pickle: bool = option(False, "allow pickle weights (pytorch_model.bin/.pt), loaded with "
                                       "torch.load(weights_only=True); off by default: safetensors/GGUF only")
    resume: bool = option(True, "reuse finished windows from a previous run in the same out folder")
    report: bool = option(True, "write report.md and plots")
    progress: bool = option(True, "show progress bars")
    seed: int = option(0, "seed for sampling and bootstrap")

    def __post_init__(self) -> None:
        problems: list[str] = []
        if isinstance(self.prefix_lens, (str, int)):
            self.prefix_lens = [self.prefix_lens]
        # "32,64" (a flag or key=value override) -> ["32", "64"]
        self.prefix_lens = [part for p in self.prefix_lens
                            for part in (p.split(",") if isinstance(p, str) else [p]) if part != ""]
        parsed = [parse_prefix_len(p) for p in self.prefix_lens]
        bad = [p for p, v in zip(self.prefix_lens, parsed) if v is None]
        check(not bad, problems, f"prefix_lens: {bad} invalid; use positive integers or 'all' (e.g. --prefix-len 32,64)")
        check(len(self.prefix_lens) > 0, problems, "prefix_lens is empty; give at least one prefix length")
        if not bad:
            self.prefix_lens = list(dict.fromkeys(parsed))  # type: ignore[arg-type]
        check(self.suffix_len >= 1, problems, f"suffix_len={self.suffix_len} must be >= 1")
        check(len(self.window) > 0, problems, f"window is empty; use one of {', '.join(PLACEMENTS)}")
        check(self.stride is None or self.stride >= 1, problems, f"stride={self.stride} must be >= 1")
        bs = self.batch_size
        check(bs == "auto" or (isinstance(bs, int) and bs >= 1), problems,
              f"batch_size={bs!r} must be a positive integer or 'auto'")
        check(self.max_docs is None or self.max_docs >= 1, problems, f"max_docs={self.max_docs} must be >= 1")
        check(self.beam >= 1, problems, f"beam={self.beam} must be >= 1 (1 = greedy only)")
        check(self.samples >= 0, problems, f"samples={self.samples} must be >= 0 (0 = off)")
        check(self.temperature > 0, problems, f"temperature={self.temperature} must be > 0")
        check(self.n_samples_adversary >= 1, problems, f"n_samples_adversary={self.n_samples_adversary} must be >= 1")
        check(all(0 < r <= 1 for r in self.min_k_ratios), problems,
              f"min_k_ratios={self.min_k_ratios} must lie in (0, 1]")
        check(self.n_bootstrap >= 0, problems, f"n_bootstrap={self.n_bootstrap} must be >= 0")
        check(len(self.extract_splits) > 0, problems, "extract_splits is empty; use [members]")
        raise_problems(problems)
