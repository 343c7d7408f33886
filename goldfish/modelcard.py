"""The model card (``README.md``, Hugging Face ``ModelCard`` format) of every exported ``model/`` folder.

:func:`write_training_card` writes it when training exports the model: YAML metadata (``library_name``,
``pipeline_tag``, ``tags``, ``base_model`` and ``license`` when the starting model declares them, ``model-index``
once evaluated) and a body that says how the model was made: the loss (Goldfish k, h, strategy, seed, the measured
dropped fraction), the starting model, the data (name, source, counts, the training split's sha256), the training
budget and how often each member was read, the code version and the package versions.

:func:`add_eval_results` appends evaluation headlines in ``model-index`` form: extraction per window placement
(exact match, ROUGE-L, token match) from a ``goldfish eval`` ``results.json``, membership-inference AUCs from its
membership section or from an experiment cell's ``attacks.json``, and the held-out loss. Each result is keyed by its
task, metric, settings and data -- the data's name and a revision hashed from the evaluated documents and the eval
config (``dataset_revision``) -- so a rerun of the same evaluation replaces its numbers and an evaluation of other
documents (a 5-document check) is added beside, never over, a 70-document one. The card records the identity of the
weights it describes (``goldfish_weights``); results computed on other weights (the folder was retrained while the
evaluation ran) are refused. Names are relative (the run's name, a starting model's Hub id or file name, the data's
recipe name): a card never holds a local path. The body's evaluation table is rewritten from the metadata. Cards are
read from the file (``ModelCard(text)``), never fetched: nothing here touches the network.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError
from .gguf_cache import general_metadata
from .io import atomic_write_text
from .model_source import is_hub_id, weights_stamp
from .provenance import code_version, versions
from .train_config import TrainConfig

CARD = "README.md"
TAGS = ["memorization", "causal-lm"]  # every model of the toolkit; goldfish-loss only where Goldfish trained it
WEIGHTS = "goldfish_weights"  # card metadata: the identity of the weights the card describes
EVAL_START, EVAL_END = "<!-- goldfish:eval:start -->", "<!-- goldfish:eval:end -->"
NO_EVAL = (
    "Not evaluated yet. `goldfish eval --model <this folder> --data ... --out ... --update-card` adds its "
    "extraction and membership headlines here and to the `model-index` metadata."
)


# ------------------------------------------------------------------------------------------------ starting model


def _hub_id(url: Any) -> str | None:
    match = re.fullmatch(r"https?://huggingface\.co/([\w.-]+/[\w.-]+)/?", str(url or ""))
    return match.group(1) if match else None


def starting_model(path: str | None) -> dict[str, Any]:
    """What the card says about the model a fine-tune started from: ``{"path", "hub_id", "license"}`` (hub id and
    license only where the model itself declares them: GGUF metadata, or a Hugging Face folder's own card)."""
    if not path:
        return {}
    if is_hub_id(path):
        return {"path": str(path), "hub_id": str(path), "license": None}
    src = Path(path).expanduser()
    info: dict[str, Any] = {"path": str(src), "hub_id": None, "license": None}
    ggufs = sorted(src.glob("*.gguf")) if src.is_dir() else [src] if src.suffix == ".gguf" else []
    gguf_file = ggufs[0] if len(ggufs) == 1 else None
    if gguf_file is not None and gguf_file.is_file():
        meta = general_metadata(gguf_file)  # recorded in the GGUF cache: the file is not parsed again
        info["license"] = meta.get("general.license")
        declared = ("general.source.huggingface.repository", "general.base_model.0.repo_url", "general.source.url")
        info["hub_id"] = next((_hub_id(meta.get(k)) for k in declared if _hub_id(meta.get(k))), None)
        stem, org, base = gguf_file.name.split(".")[0], meta.get("general.organization"), meta.get("general.basename")
        if info["hub_id"] is None and org and base and stem.lower().startswith(str(base).lower()):
            # llama.cpp names a converted file after its repository (<Basename>-<size>-<finetune>), owned by the
            # organization in general.organization: HuggingFaceTB + SmolLM2-135M-Instruct
            info["hub_id"] = f"{org}/{stem}"
    elif (src / CARD).is_file():
        try:
            data = _read(src / CARD).data
        except UserError as e:  # someone else's card: what it declares is unknown, the fine-tune is not at stake
            print(f"warning: {e}; the new card names no license or base model of it", file=sys.stderr)
            return info
        info["license"] = data.license
        info["hub_id"] = data.base_model if isinstance(data.base_model, str) else None
    return info


# ------------------------------------------------------------------------------------------------ training card


def _read(path: Path):
    """The model card at ``path``; one line when it is not UTF-8 or its metadata is not plain YAML (a
    ``!!python/object`` tag is never constructed: safe YAML refuses it)."""
    from huggingface_hub import ModelCard

    try:
        return ModelCard(path.read_text(encoding="utf-8"), ignore_metadata_errors=True)
    except UnicodeDecodeError as e:
        raise UserError(
            f"model card {path} is not UTF-8 text (invalid byte at offset {e.start}); re-encode it as "
            f"UTF-8 or remove it"
        ) from None
    except (yaml.YAMLError, ValueError) as e:
        raise UserError(
            f"model card {path} has metadata that is not plain YAML ({str(e).splitlines()[0][:100]}); "
            f"fix its --- header or remove the card"
        ) from None


def _loss_line(cfg: TrainConfig, summary: dict) -> str:
    if not summary.get("steps"):
        return "none: the untrained initial weights (an experiment's control)"
    if cfg.loss.type != "goldfish":
        return "standard causal-LM loss (every target token trained on)"
    g = cfg.loss.goldfish
    frac = summary.get("dropped_frac")
    measured = f"; measured dropped fraction {frac:.4f}" if isinstance(frac, (int, float)) else ""
    return (
        f"**Goldfish Loss** (Hans et al., NeurIPS 2024): k={g.k}, h={g.h}, strategy `{g.strategy}`, seed "
        f"{g.seed} -- a pseudo-random 1/{g.k} of the target tokens, chosen by a hash of the {g.h} tokens ending at "
        f"each, is left out of the loss, the same positions every time the same text is seen{measured}"
    )


def _versions() -> str:
    v = versions(("torch", "transformers"))  # goldfish.provenance, as every result records them
    return f"goldfish-toolkit {code_version()}, torch {v['torch']}, transformers {v['transformers']}"


def model_name(cfg: TrainConfig) -> str:
    """The name a trained model goes by: the run's name (an experiment cell: ``<experiment>-<cell id>``, as its
    TensorBoard/W&B run), else its run folder's name."""
    log = cfg.logging
    if log.run_name:
        return f"{log.group}-{log.run_name}" if log.group else log.run_name
    return Path(cfg.out).resolve().name


def _short(name: Any) -> str:
    """A file or folder name instead of a local path (a tokenizer or source named by its path; a source label
    ``<reader>:<path>``, as a manifest records it, keeps its reader's name); names stay."""
    text = str(name or "")
    reader, sep, rest = text.partition(":")
    if sep and reader and "/" not in reader and rest and _is_path(rest):
        return f"{reader}:{_short(rest)}"
    return Path(text).expanduser().name if text and _is_path(text) else text


def _is_path(text: str) -> bool:
    """Whether ``text`` names a local file or folder (absolute, under the home folder, relative with a folder part,
    or existing): what a card never holds."""
    path = Path(text).expanduser()
    return path.is_absolute() or text.startswith(("~", "./", "../")) or path.exists()


def _device(summary: dict) -> str:
    dev = summary.get("device") or {}
    if not dev:
        return ""
    threads = f", {dev['threads']} threads" if dev.get("threads") else ""
    bf16 = "faster" if dev.get("native_bf16") else "not faster"
    return f" on {dev.get('name')} ({dev.get('type')}{threads}; bf16 {bf16} than fp32 here: {dev.get('bf16_reason')})"


def _training_body(
    cfg: TrainConfig, summary: dict, manifest: dict, data_sha256: str | None, start: dict[str, Any]
) -> str:
    counts = manifest.get("counts", {})
    start_text = (
        (
            f"`{Path(start['path']).name}`"
            + (f" ([{start['hub_id']}](https://huggingface.co/{start['hub_id']}))" if start.get("hub_id") else "")
        )
        if start
        else f"none: trained from scratch (`{cfg.model.name}`, seed {cfg.seed})"
    )
    rows = [
        ("loss", _loss_line(cfg, summary)),
        ("starting model", start_text),
        ("parameters", f"{summary.get('params', 0):,}"),
        (
            "data",
            f"`{manifest.get('name')}` from `{_short(manifest.get('source')) or 'unknown'}`, tokenizer "
            f"`{_short(manifest.get('tokenizer', {}).get('name'))}`; "
            + ", ".join(f"{v} {k}" for k, v in counts.items()),
        ),
        ("training split sha256", f"`{data_sha256}`"),
        (
            "budget",
            f"{summary.get('steps')} steps, {summary.get('epochs', 0):.2f} epochs, {summary.get('tokens'):,} "
            f"tokens ({summary.get('global_batch_size')} rows x {summary.get('seq_len')} tokens per step), "
            f"AdamW lr {cfg.optim.lr:g} (warmup + cosine), {summary.get('world_size')} process(es)",
        ),
        ("precision", f"{cfg.precision}{_device(summary)}"),
        (
            "final training loss",
            f"kept {_num(summary.get('final_kept_loss'))}, dropped "
            f"{_num(summary.get('final_dropped_loss'))} (nats per token)",
        ),
        ("code", _versions()),
    ]
    exposures = summary.get("exposures") or {}
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    reads = "\n".join(f"| {r} | {lo} | {hi} |" for r, (lo, hi) in exposures.items())
    return f"""# {model_name(cfg)}

A Llama-architecture causal language model trained with the goldfish toolkit, a research toolkit for studying
memorization in language models. Made for measuring memorization (extraction, membership inference): its member
documents are known and were seen the number of times listed below.

## Training

| | |
|---|---|
{table}

Times each member document was read, by its labelled repetition count:

| repetitions | fewest reads | most reads |
|---|---|---|
{reads}

## Evaluation

{EVAL_START}
{NO_EVAL}
{EVAL_END}

## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")
tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")
```
"""


def _num(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "n/a"


def write_training_card(
    model_dir: str | Path, cfg: TrainConfig, summary: dict, manifest: dict, data_sha256: str | None
) -> Path:
    """Write ``<model_dir>/README.md`` for a model trained per ``cfg`` (``summary``: the run's ``summary.json``
    values; ``manifest``: the prepared data's). Returns the card's path."""
    from huggingface_hub import ModelCard, ModelCardData

    start = starting_model(cfg.model.path)
    if not summary.get("steps"):
        tags = TAGS + ["untrained"]  # an experiment's control: the starting weights
    elif cfg.loss.type == "goldfish":
        tags = ["goldfish-loss", *TAGS, f"goldfish-k{cfg.loss.goldfish.k}"]
    else:
        tags = TAGS + ["standard-loss"]
    identity = {WEIGHTS: weights_id(weights_stamp(model_dir))} if (Path(model_dir) / "config.json").is_file() else {}
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=tags,
        base_model=start.get("hub_id"),
        license=start.get("license"),
        model_name=model_name(cfg),
        **identity,
    )
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + _training_body(cfg, summary, manifest, data_sha256, start))
    path = Path(model_dir) / CARD
    atomic_write_text(path, str(card))
    return path


# ------------------------------------------------------------------------------------------------ evaluation


def weights_id(stamp: list) -> str:
    """A short identity of a model's weight files (:func:`goldfish.model_source.weights_stamp`: names, sizes,
    mtimes)."""
    return hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:16]


def data_revision(results: dict) -> str | None:
    """What an evaluation's numbers are of: a hash of its documents (``data.documents_sha256``, every split), its
    windows (``data.sha256``) and the eval settings that change them (tasks, data, decoding, membership, goldfish)."""
    data, config = results.get("data") or {}, results.get("config") or {}
    if not data:
        return None
    what = {
        "documents": data.get("documents_sha256"),
        "windows": data.get("sha256"),
        **{k: config.get(k) for k in ("tasks", "data", "decoding", "membership", "goldfish")},
    }
    what["data"] = {k: v for k, v in (what["data"] or {}).items() if k != "path"}  # the documents say what it is
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:12]


def eval_results(results: dict | None = None, attacks: dict | None = None, source: str = "goldfish eval") -> list:
    """``EvalResult`` headlines of a ``goldfish eval`` ``results.json`` and/or an experiment cell's ``attacks.json``:
    extraction per window placement (exact match, ROUGE-L on words as rouge-score computes it and on token ids, token
    match), membership AUCs, held-out loss; each keyed by its data (name, revision) and settings."""
    from huggingface_hub import EvalResult

    out = []
    results = results or {}
    config, data = results.get("config") or {}, results.get("data") or {}
    dataset = {
        "dataset_type": "goldfish-prepared",
        "dataset_name": dataset_name(data.get("path")),
        "dataset_revision": data_revision(results),
    }
    counts = f"{data.get('members')} members, {data.get('nonmembers')} nonmembers" if data else "documents"

    def add(task_type: str, task_name: str, split: str, metric: str, value: Any, name: str, setting: str) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(
                EvalResult(
                    task_type=task_type,
                    task_name=task_name,
                    dataset_split=split,
                    metric_type=metric,
                    metric_value=round(float(value), 6),
                    metric_name=name,
                    metric_config=setting,
                    metric_args={"source": source},
                    **dataset,
                )
            )

    ex = config.get("data") or {}
    summary = results.get("summary") or {}
    # the members' rows (a nonmember reproduced says nothing about training); results without them: by_window
    members = (
        summary["by_split_window"].get("members") or {}
        if "by_split_window" in summary
        else summary.get("by_window") or {}
    )
    for placement, row in members.items():
        setting = (
            f"greedy, window={placement}, prefix_lens={ex.get('prefix_lens')}, suffix_len={ex.get('suffix_len')}"
            f", {row.get('n_windows')} windows"
        )
        for metric, key, name in (
            ("exact_match", "exact_match_rate", "exact match rate"),
            ("rouge", "rouge_l_paper", "ROUGE-L (rouge-score, words)"),
            ("rouge", "rouge_l", "ROUGE-L (tokens)"),
            ("accuracy", "token_match", "token match"),
        ):
            add("text-generation", "verbatim extraction", "members", metric, row.get(key), name, setting)
    sources = [(results.get("membership") or {}).get("attacks") or {}, (attacks or {}).get("attacks") or {}]
    for attack_set in sources:
        for attack, row in attack_set.items():
            add(
                "membership-inference",
                "membership inference",
                "members vs nonmembers",
                "roc_auc",
                row.get("auc"),
                f"{attack} attack ROC-AUC",
                f"whole documents, {counts}",
            )
    add(
        "text-generation",
        "held-out loss",
        "nonmembers",
        "loss",
        (attacks or {}).get("heldout_loss"),
        "held-out loss (nats per token)",
        f"teacher-forced, {counts}",
    )
    return out


def dataset_name(path: str | None) -> str:
    """The name a card gives evaluation data: a prepared folder's recipe name, else the file or folder name."""
    if not path:
        return "data"
    manifest = Path(path) / "manifest.json"
    try:
        return str(json.loads(manifest.read_text(encoding="utf-8")).get("name") or Path(path).name)
    except (OSError, ValueError):
        return Path(path).name


def _key(r) -> tuple:
    return (
        r.task_type,
        r.task_name,
        r.dataset_type,
        r.dataset_name,
        r.dataset_revision,
        r.dataset_split,
        r.metric_type,
        r.metric_name,
        r.metric_config,
    )


def _eval_table(results: list) -> str:
    if not results:
        return NO_EVAL
    lines = ["| task | data | split | metric | setting | value | source |", "|---|---|---|---|---|---|---|"]
    lines += [
        f"| {r.task_name} | {r.dataset_name}"
        + (f" ({r.dataset_revision})" if r.dataset_revision else "")
        + f" | {r.dataset_split} | {r.metric_name} | {r.metric_config} | {r.metric_value:.4f} | "
        f"{(r.metric_args or {}).get('source', '')} |"
        for r in results
    ]
    return "\n".join(lines)


def add_eval_results(
    model_dir: str | Path, new: list, weights: list | None = None, out: str | Path | None = None
) -> Path:
    """Merge the ``EvalResult`` list ``new`` into ``<model_dir>/README.md`` (created if the folder has no card):
    equal results (same task, data and its revision, metric and setting) are replaced, others kept; the body's
    evaluation table is rewritten (appended at the end of a card that has none). Refuses a path that is not a model
    folder and, given ``weights`` (the :func:`goldfish.model_source.weights_stamp` the results were computed on), a
    folder whose weights or card now describe other weights: nothing is written then.

    ``out``: the folder the card is written to instead of ``model_dir`` (a model of the Hugging Face cache, which is
    never written: the card starts from the cached one, or from ``out``'s own once it has one). A card that is a
    symbolic link is refused (never written through, never replaced)."""
    from huggingface_hub import ModelCard, ModelCardData

    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        raise UserError(
            f"--update-card needs a Hugging Face model folder (with config.json); {folder} is not one "
            f"(a .gguf file or another folder keeps no card of ours)"
        )
    target = Path(out) if out is not None else folder
    path = target / CARD
    check_card_path(path)
    source = path if path.is_file() or out is None else folder / CARD
    name = folder.parent.name if folder.name == "model" else folder.name  # a run folder's model/: the run's name
    if out is not None and folder.parent.name == "snapshots":  # models--ORG--NAME/snapshots/<revision>
        name = folder.parent.parent.name.removeprefix("models--").replace("--", "/")
    card = _read(source) if source.is_file() else ModelCard(f"---\n{ModelCardData().to_yaml()}\n---\n\n# {name}\n")
    if weights is not None:
        # a card read from a read-only model (into ``out``) records the weights where they were made (other file
        # times): only the files themselves are compared then
        recorded = card.data.to_dict().get(WEIGHTS) if source == path else None
        if weights_stamp(folder) != weights or recorded not in (None, weights_id(weights)):
            raise UserError(
                f"the model in {folder} is not the one evaluated: its weights changed after the evaluation "
                f"read them (a training run replaced it?); its card is unchanged; evaluate it again to "
                f"add its numbers (the results are in the eval folder)"
            )
    merged = {_key(r): r for r in (card.data.eval_results or [])}
    merged.update({_key(r): r for r in new})
    card.data.eval_results = list(merged.values()) or None
    card.data.model_name = card.data.model_name or name
    table = f"{EVAL_START}\n{_eval_table(card.data.eval_results or [])}\n{EVAL_END}"
    text = card.text
    if EVAL_START in text and EVAL_END in text:
        head, rest = text.split(EVAL_START, 1)
        text = head + table + rest.split(EVAL_END, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## Evaluation\n\n{table}\n"
    target.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, f"---\n{card.data.to_yaml()}\n---\n{text}")
    return path


def check_card_path(path: Path) -> None:
    """One line when the card at ``path`` (or its folder) is a symbolic link: goldfish writes no file through a link
    and replaces no link of the user's."""
    for p in (path, path.parent):
        if p.is_symlink():
            raise UserError(
                f"{p} is a symbolic link; goldfish does not write a model card through a link (nor "
                f"replace it): copy the model into a folder of its own and update that one's card, or "
                f"leave --update-card out"
            )
