"""``EvalConfig``: every setting of ``goldfish eval``, in sections, with the config grammar of ``goldfish train``.

Precedence: **defaults < YAML file < command line** (``key=value`` overrides such as ``data.prefix_lens=[32,64]``,
and a few shorthand flags, :data:`SHORTHANDS`, that name one key each). Sections:

* ``model``      -- what to load and how (path, reference model, dtype, device, threads, pickle opt-in);
* ``data``       -- documents and extraction windows (path, nonmembers, groups, prefix/suffix lengths, placements);
* ``decoding``   -- generation for extraction (batch size, stop at eos, beam search, sampling, (n, p) n, the
  mask-consistent adversary);
* ``membership`` -- membership-inference scoring (token budget, context windows, Min-K ratios, bootstrap);
* ``goldfish``   -- the model's Goldfish mask settings for ``decoding.adversary`` (default: the run folder's; ``mask``
  is its earlier name, an alias);
* ``canaries``   -- Secret-Sharer exposure of a prepared folder's canaries (candidates per canary);
* ``series``     -- a list of models or a run's checkpoints evaluated into one folder (:mod:`goldfish.eval.series`);
* top level      -- ``out``, ``tasks``, resume/overwrite, report, progress, seed.

``model.path``, ``data.path`` and ``out`` may stay unset in a YAML file (an experiment fills them per cell);
:func:`goldfish.eval.run.run_eval` checks them before doing any work.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar, Literal, Union

from goldfish.config import check, check_at_most, check_seed, option, raise_problems, shown
from goldfish.masks import Strategy
from goldfish.model_source import is_hub_id, split_revision, with_revision
from goldfish.ownership import MARKER
from goldfish.precision import PRECISIONS, canonical_precision

from .windows import ALL, PLACEMENTS

TASKS = ("extraction", "membership")  # the default tasks; "canaries" is asked for by name
# shorthand flag -> config key (docs/evaluation.md); every other setting is a key=value override. --device,
# --batch-size and --limit are lm-evaluation-harness's flags for the same settings; a flag with a dash is also
# accepted with an underscore (--batch_size, --max_offset), as lm-eval spells them
SHORTHANDS = {
    "--model": "model.path",
    "--data": "data.path",
    "--nonmembers": "data.nonmembers",
    "--out": "out",
    "--offsets": "data.offsets",
    "--max-offset": "data.max_offset",
    "--threads": "model.threads",
    "--device": "model.device",
    "--dtype": "model.dtype",
    "--batch-size": "decoding.batch_size",
    "--limit": "data.max_docs",
}


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


def _split_commas(values: list) -> list:
    """``["32,64", 128]`` (a flag or ``key=value`` override) -> ``["32", "64", 128]``."""
    return [
        part
        for v in values
        for part in ([p.strip() for p in v.split(",")] if isinstance(v, str) else [v])
        if part != ""
    ]


@dataclasses.dataclass
class ModelSection:
    """The model under evaluation and how it is loaded (offline; safetensors/GGUF; never remote code)."""

    path: Union[str, None] = option(
        None,
        "model to evaluate: a local Hugging Face folder, a .gguf file, a training "
        "run folder (its model/ is used), or a Hub id ORG/NAME (from the Hugging "
        "Face cache, fetched when absent and online: safetensors only)",
    )
    revision: Union[str, None] = option(
        None,
        "the Hub revision of a Hub id model.path: a branch, tag or commit "
        "(default: the cache's main, or its one snapshot); recorded in "
        "results.json's model.revision as the snapshot's commit. The same as "
        "--model ORG/NAME@REVISION",
    )
    reference: Union[str, None] = option(
        None,
        "reference model for the reference-calibrated membership attack "
        "(same vocabulary; loaded first, so a bad path fails at once)",
    )
    dtype: str = option(
        "checkpoint",
        "weights precision: checkpoint (the default: the checkpoint's own dtype, as "
        "Hugging Face's dtype=auto and lm-eval's dtype=auto mean it; a verdict then "
        "does not change with the CPU) | auto (bf16 where the device computes it "
        "faster, by the rule of goldfish.hardware: faster, and verdicts may differ "
        "from the checkpoint's) | fp32 | bf16 | fp16; float32/bfloat16/float16 are "
        "aliases (goldfish.precision)",
    )
    device: str = option("auto", "torch device: auto (cuda if available, else cpu), cpu, cuda, cuda:1, mps")
    threads: Union[int, None] = option(
        None,
        "CPU threads per process (torch.set_num_threads); default: the "
        "physical cores divided among a launch's processes on this node "
        "(OMP_NUM_THREADS when set) for the goldfish command; a library "
        "call keeps its process's setting",
    )
    allow_pickle: bool = option(
        False,
        "allow pickle weights (pytorch_model.bin/.pt), loaded with "
        "torch.load(weights_only=True); off by default: safetensors/GGUF only",
    )
    allow_partial: bool = option(
        False,
        "evaluate a checkpoint that is not the whole model (tensors missing from "
        "its files, or not the model's), its missing tensors random: off by "
        "default (refused in one line); results.json's model.partial and "
        "report.md name what was missing. Tensors of another shape are refused "
        "always, and so is a partial GGUF",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.threads is None or self.threads >= 1, problems, f"threads={self.threads} must be >= 1")
        dtype = canonical_precision(self.dtype)
        check(dtype is not None, problems, f"dtype={shown(self.dtype)} must be one of {', '.join(PRECISIONS)}")
        self.dtype = dtype or self.dtype
        if self.revision is not None:
            name, pinned = split_revision(self.path) if self.path else (None, None)
            check(
                self.path is not None and is_hub_id(name) and pinned in (None, self.revision),
                problems,
                f"revision={shown(self.revision)} needs model.path to be a Hub id ORG/NAME"
                + (f" (it is pinned to @{pinned} already)" if pinned else f", not {shown(self.path)}"),
            )
            if self.path is not None and pinned is None and is_hub_id(name):
                self.path = with_revision(self.path, self.revision)  # every loader reads ORG/NAME@REVISION
        raise_problems(problems)


def _is_corpus_file(path) -> bool:
    """``data.path`` names a corpus -- an existing JSONL file, or an existing folder of text files that no ``goldfish
    prepare`` made (neither its manifest.json nor its ownership marker, which an unfinished prepare already has) --
    whose default windows cover each whole document (``stride``). A path that does not exist yet (an experiment's
    prepared folder before its prepare phase) is not: the default must not change when the folder appears."""
    if not path:
        return False
    p = Path(str(path)).expanduser()
    if p.is_file():
        return True
    return p.is_dir() and not any((p / name).exists() for name in ("manifest.json", MARKER))


@dataclasses.dataclass
class DataSection:
    """The documents, their groups, and where extraction windows sit in them (see goldfish.eval.windows)."""

    path: Union[str, None] = option(
        None,
        "documents: a prepared folder (goldfish prepare; its members split), "
        'a JSONL file with one {"id", "text"} object per line, or a folder '
        "of .txt/.md files (one document each)",
    )
    nonmembers: Union[str, None] = option(
        None,
        "nonmember documents for membership inference (prepared folder or "
        "JSONL); default: the data folder's nonmembers split, if any",
    )
    text_field: str = option("text", "JSONL field that holds each document's text (e.g. data.text_field=body)")
    group_field: str = option(
        "group",
        "JSONL field whose value groups documents in the summary (by_group); documents without it are in no group",
    )
    max_docs: Union[int, None] = option(None, "evaluate only the first N documents of each split")
    extract_splits: list[str] = option(
        factory=lambda: ["members"],
        help="splits whose documents get extraction windows (add 'nonmembers' for a never-trained control)",
    )
    prefix_lens: list[Union[int, str]] = option(
        factory=lambda: [32],
        help="prefix lengths P in tokens; 'all' or -1 = all but the last suffix_len tokens of each document",
    )
    suffix_len: int = option(50, "suffix length S: tokens generated and compared with the true continuation")
    window: Union[list[Literal["end", "start", "stride", "offsets"]], None] = option(
        None,
        "where windows sit: start (prefix at token 0), end (suffix = last S tokens), stride (prefix starts "
        "0, stride, 2·stride ...), offsets (prefix starts at data.offsets); a list evaluates several "
        "placements, each reported separately; default: offsets when data.offsets is set, stride over the "
        "whole document for a JSONL file or a folder of text files (an audit of a corpus), else start (a "
        "prepared folder)",
    )
    stride: Union[int, None] = option(
        None,
        "step between stride windows in tokens (default: suffix_len, so the "
        "suffixes tile each document from token P on)",
    )
    offsets: list[Union[int, str]] = option(
        factory=list, help="prefix start offsets of the 'offsets' placement, e.g. [0, 100, 200] (--offsets 0,100,200)"
    )
    max_offset: Union[int, None] = option(
        None,
        "stride and offsets windows start at most this many tokens into "
        "a document (default: anywhere a whole window fits)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        if isinstance(self.prefix_lens, (str, int)):
            self.prefix_lens = [self.prefix_lens]
        self.prefix_lens = _split_commas(self.prefix_lens)
        parsed = [parse_prefix_len(p) for p in self.prefix_lens]
        bad = [p for p, v in zip(self.prefix_lens, parsed) if v is None]
        check(
            not bad,
            problems,
            f"prefix_lens: {bad} invalid; use positive integers or 'all' (e.g. data.prefix_lens=[32,64])",
        )
        check(len(self.prefix_lens) > 0, problems, "prefix_lens is empty; give at least one prefix length")
        if not bad:
            self.prefix_lens = list(dict.fromkeys(parsed))  # type: ignore[arg-type]
        offsets = _split_commas(self.offsets if isinstance(self.offsets, list) else [self.offsets])
        try:
            self.offsets = sorted({int(o) for o in offsets})
        except ValueError:
            problems.append(f"offsets={offsets} must be integers >= 0, e.g. --offsets 0,100,200")
        check(
            all(isinstance(o, int) and o >= 0 for o in self.offsets),
            problems,
            f"offsets={self.offsets} must be integers >= 0",
        )
        if self.window is None:  # a JSONL corpus is audited whole; a prepared folder keeps its first window
            self.window = ["offsets"] if self.offsets else ["stride"] if _is_corpus_file(self.path) else ["start"]
        self.window = list(dict.fromkeys(self.window))
        check(len(self.window) > 0, problems, f"window is empty; use one of {', '.join(PLACEMENTS)}")
        check(
            "offsets" not in self.window or bool(self.offsets),
            problems,
            "window 'offsets' needs data.offsets, e.g. --offsets 0,100,200",
        )
        check(self.suffix_len >= 1, problems, f"suffix_len={self.suffix_len} must be >= 1")
        check(self.stride is None or self.stride >= 1, problems, f"stride={self.stride} must be >= 1")
        check(self.max_offset is None or self.max_offset >= 0, problems, f"max_offset={self.max_offset} must be >= 0")
        check(
            bool(str(self.text_field).strip()),
            problems,
            "text_field is empty; name the JSONL field holding the text, e.g. data.text_field=text",
        )
        check(self.max_docs is None or self.max_docs >= 1, problems, f"max_docs={self.max_docs} must be >= 1")
        check(len(self.extract_splits) > 0, problems, "extract_splits is empty; use [members]")
        raise_problems(problems)


@dataclasses.dataclass
class DecodingSection:
    """Generation for extraction: greedy always; beam search and sampling on request."""

    batch_size: Union[int, str] = option(
        "auto", "windows per generation batch, or 'auto' (memory estimate on GPU, halved on out-of-memory; 32 on CPU)"
    )
    stop_at_eos: bool = option(
        False,
        "end a continuation after its first eos token, as plain model.generate "
        "does (it is then shorter than suffix_len and not an exact match unless the "
        "truth ends there); off: always decode suffix_len tokens",
    )
    beam: int = option(1, "beam width; > 1 adds a beam-search extraction (beam_exact_match) next to greedy")
    samples: int = option(
        0,
        "sampled extraction: draw this many temperature samples per window and count exact "
        "reproductions (sample_rate; 0 = off)",
    )
    temperature: float = option(1.0, "sampling temperature for `samples`")
    n_samples_adversary: int = option(100, "n of the (n, p)-extraction chance 1-(1-p_suffix)^n")
    adversary: Union[Literal["mask_consistent"], None] = option(
        None,
        "mask_consistent: also decode with the Goldfish mask's public hash (at a position believed dropped, "
        "only the tokens whose window hashes to 'drop'): told the dropped positions (mc_oracle) and by "
        "confidence (mc_switch); needs the mask settings (the run folder's, or the mask section)",
    )
    switch_threshold: Union[float, None] = option(
        None, "mc_switch believes a position dropped where the top-1 probability is below this (null = 0.9)"
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        bs = self.batch_size
        check(
            bs == "auto" or (isinstance(bs, int) and bs >= 1),
            problems,
            f"batch_size={shown(bs)} must be a positive integer or 'auto'",
        )
        check(self.beam >= 1, problems, f"beam={self.beam} must be >= 1 (1 = greedy only)")
        check_at_most(self.beam, 1024, problems, "beam", "every beam is a row of the generation batch")
        check(self.samples >= 0, problems, f"samples={self.samples} must be >= 0 (0 = off)")
        check_at_most(self.samples, 10**6, problems, "samples", "every sample is one generation per window")
        check(self.temperature > 0, problems, f"temperature={self.temperature} must be > 0")
        check(self.n_samples_adversary >= 1, problems, f"n_samples_adversary={self.n_samples_adversary} must be >= 1")
        check(
            self.switch_threshold is None or 0 < self.switch_threshold <= 1,
            problems,
            f"switch_threshold={self.switch_threshold} must be in (0, 1]",
        )
        raise_problems(problems)


@dataclasses.dataclass
class MaskSection:
    """The Goldfish mask the model was trained with, for ``decoding.adversary=mask_consistent``. Unset keys come from
    the training run folder (its config.yaml); a key set here overrides it (e.g. to attack a GGUF or HF checkpoint,
    or to test a wrong guess)."""

    k: Union[int, None] = option(None, "drop 1 in k target tokens (null = the run folder's)")
    h: Union[int, None] = option(None, "hashed context width (null = the run folder's)")
    strategy: Union[Strategy, None] = option(
        None, "hash | hash-table | canonical | hash-preceding | static (null = the run folder's)"
    )
    seed: Union[int, None] = option(None, "salt of the hash (null = the run folder's, or 0)")
    special_ids: Union[list[int], None] = option(
        None, "ids never dropped nor hashed, besides the tokenizer's eos/bos/pad (null = the run folder's)"
    )


@dataclasses.dataclass
class MembershipSection:
    """Membership inference (members vs nonmembers, whole documents) in bounded memory (goldfish.eval.scoring)."""

    token_budget: int = option(
        4096,
        "padded tokens per scoring forward pass (documents are length-bucketed; a "
        "longer document is a batch of its own)",
    )
    window: Union[int, None] = option(
        None,
        "documents longer than this are scored in windows of this many tokens, "
        "so the cost grows linearly with length (default: 2048, capped by the "
        "model's context; chosen with benchmarks/long_scoring.py)",
    )
    stride: Union[int, None] = option(
        None,
        "step between those windows (default: 3/4 of the window); each token "
        "is scored once, with at least window - stride tokens of context",
    )
    chunk: int = option(512, "positions per output-head chunk: at most chunk × vocabulary fp32 logits at a time")
    lowercase_tokens: Union[int, None] = option(
        1024,
        "the lowercase attack compares the first this many tokens of "
        "each document with their lowercased text (its extra pass "
        "is bounded); null: the whole document",
    )
    min_k_ratios: list[float] = option(factory=lambda: [0.2], help="Min-K% / Min-K%++ ratios (0 < k <= 1)")
    recall_shots: int = option(
        1,
        "ReCaLL (attack recall): nonmember documents joined into the prefix P of LL(x|P) "
        "/ LL(x); they are then not scored themselves (0 = no ReCaLL)",
    )
    recall_prefix_tokens: int = option(256, "ReCaLL: P is the last this many tokens of those documents")
    dc_pdd: bool = option(
        True, "DC-PDD (attack dc_pdd): token probabilities calibrated by the nonmembers' token frequencies"
    )
    dc_pdd_clip: float = option(0.01, "DC-PDD: the bound a each token's p * -log f is clipped at (the paper's 0.01)")
    n_bootstrap: int = option(1000, "bootstrap resamples for the AUC confidence intervals")
    keep_tokens: bool = option(
        False,
        "also keep each document's per-token log-probabilities and top-1 correctness "
        "in membership.partial.jsonl (an experiment sets it: its attacks analysis "
        "reads them instead of scoring the documents again); changes no result",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.token_budget >= 1, problems, f"token_budget={self.token_budget} must be >= 1")
        check(self.window is None or self.window >= 2, problems, f"window={self.window} must be >= 2")
        check(self.stride is None or self.stride >= 1, problems, f"stride={self.stride} must be >= 1")
        check(
            self.window is None or self.stride is None or self.stride <= self.window,
            problems,
            f"stride={self.stride} must be <= window={self.window} (else tokens are skipped)",
        )
        check(self.chunk >= 1, problems, f"chunk={self.chunk} must be >= 1")
        check(
            self.lowercase_tokens is None or self.lowercase_tokens >= 2,
            problems,
            f"lowercase_tokens={self.lowercase_tokens} must be >= 2 (or null: whole documents)",
        )
        check(
            all(0 < r <= 1 for r in self.min_k_ratios), problems, f"min_k_ratios={self.min_k_ratios} must lie in (0, 1]"
        )
        check(self.recall_shots >= 0, problems, f"recall_shots={self.recall_shots} must be >= 0 (0 = no ReCaLL)")
        check(
            self.recall_prefix_tokens >= 1, problems, f"recall_prefix_tokens={self.recall_prefix_tokens} must be >= 1"
        )
        check(self.dc_pdd_clip > 0, problems, f"dc_pdd_clip={self.dc_pdd_clip} must be > 0")
        check(self.n_bootstrap >= 0, problems, f"n_bootstrap={self.n_bootstrap} must be >= 0")
        check_at_most(self.n_bootstrap, 10**6, problems, "n_bootstrap", "each resample is an AUC over every score")
        raise_problems(problems)


@dataclasses.dataclass
class CanarySection:
    """Secret-Sharer exposure of the data's canaries (goldfish.eval.canaries; task ``canaries``)."""

    n_candidates: int = option(
        1000,
        "candidate secrets sampled uniformly from the randomness space per canary "
        "(the rank estimate resolves exposures up to ~log2 of this)",
    )
    max_full: int = option(
        4096,
        "enumerate the whole randomness space instead when it has at most this many "
        "secrets (exact rank; scored by the chain rule: a 2-token secret over a 4,096-id "
        "vocabulary, 16.8 M secrets, costs ~4 k forward tokens per canary)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.n_candidates >= 1, problems, f"n_candidates={self.n_candidates} must be >= 1")
        check(self.max_full >= 0, problems, f"max_full={self.max_full} must be >= 0")
        check_at_most(self.n_candidates, 10**7, problems, "n_candidates", "every candidate secret is held and scored")
        # an enumerated space is scored by the chain rule (|R| / A forward tokens) and held as float64: 0.5 GiB at most
        check_at_most(self.max_full, 2**26, problems, "max_full", "every secret's score is held")
        raise_problems(problems)


@dataclasses.dataclass
class SeriesSection:
    """A series of models evaluated on the same data into one folder (goldfish.eval.series): a size family, or the
    checkpoints of one training run."""

    models: list[str] = option(
        factory=list,
        help="models evaluated one after another (Hugging Face folders, .gguf "
        "files, training run folders), e.g. a size family, in the order "
        "given (the last is the one the others' memorised sets predict)",
    )
    labels: list[str] = option(factory=list, help="a label per entry of models (default: the folder or file name)")
    checkpoints: Union[str, None] = option(
        None,
        "a training run folder: every complete checkpoint of "
        "<run>/checkpoints/ (exported to Hugging Face format) and the run's "
        "final model/, in step order",
    )
    memorized: float = option(
        1.0,
        "a window counts as memorised when its token match (the memorization score of "
        "Biderman et al. 2023) is >= this; 1.0 = exact match",
    )
    keep_exports: bool = option(
        False,
        "keep the Hugging Face folders exported from checkpoints once every model "
        "of the series is evaluated (they are needed only to resume)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            not (self.models and self.checkpoints),
            problems,
            "series.models and series.checkpoints are both set; give one of them",
        )
        check(
            not self.labels or len(self.labels) == len(self.models),
            problems,
            f"series.labels has {len(self.labels)} entries but series.models {len(self.models)}",
        )
        check(len(set(self.labels)) == len(self.labels), problems, f"series.labels {self.labels} repeat a label")
        check(0 < self.memorized <= 1, problems, f"series.memorized={self.memorized} must lie in (0, 1]")
        raise_problems(problems)

    @property
    def active(self) -> bool:
        return bool(self.models or self.checkpoints)


@dataclasses.dataclass
class EvalConfig:
    """What to evaluate, how to cut extraction windows, and how to run the model."""

    # other commands' and earlier spellings of a setting (goldfish.config.aliases; docs/evaluation.md "Names")
    ALIASES: ClassVar[dict[str, str]] = {
        "mask": "goldfish",
        "precision": "model.dtype",
        "device": "model.device",
        "limit": "data.max_docs",
        "batch_size": "decoding.batch_size",
    }

    out: Union[str, None] = option(None, "output folder for results.json, results.csv, report.md and plots")
    tasks: list[Literal["extraction", "membership", "canaries"]] = option(
        factory=lambda: list(TASKS),
        help="what to run: extraction (windows, generation), membership (needs "
        "nonmembers; skipped without them), canaries (the Secret-Sharer "
        "exposure of a prepared folder's canaries); [membership] = scores only",
    )
    model: ModelSection = option(factory=ModelSection, help="the model and how to load it")
    data: DataSection = option(factory=DataSection, help="documents and extraction windows")
    decoding: DecodingSection = option(factory=DecodingSection, help="generation settings of extraction")
    membership: MembershipSection = option(factory=MembershipSection, help="membership-inference scoring")
    goldfish: MaskSection = option(
        factory=MaskSection,
        help="the model's Goldfish mask, for decoding.adversary "
        "(goldfish.k ...: the same spelling as goldfish train's)",
    )
    canaries: CanarySection = option(factory=CanarySection, help="canary exposure (task canaries)")
    series: SeriesSection = option(
        factory=SeriesSection,
        help="evaluate a series of models (a size family or a run's checkpoints) instead of model.path",
    )
    resume: bool = option(
        True,
        "reuse finished windows and membership scores of a previous run in the same out "
        "folder (its fingerprint must match)",
    )
    overwrite: bool = option(
        False,
        "start afresh in an out folder that holds another evaluation: the new one is "
        "built beside it and replaces it when finished (only a folder goldfish eval "
        "made is replaced)",
    )
    report: bool = option(True, "write report.md, report.html and plots")
    log_samples: bool = option(
        False,
        "also write samples.jsonl: one line per extraction window (its ids, the greedy "
        "continuation, the verdicts), as lm-eval's --log_samples (--log-samples)",
    )
    progress: bool = option(True, "show progress bars (also transformers' GGUF conversion bar)")
    seed: int = option(0, "seed for sampling and bootstrap")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(len(self.tasks) > 0, problems, f"tasks is empty; use {list(TASKS)}, [membership] or [canaries]")
        check_seed(self.seed, problems)
        self.tasks = list(dict.fromkeys(self.tasks))
        raise_problems(problems)
