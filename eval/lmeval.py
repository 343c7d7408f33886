"""``lm_eval_results.json``: an evaluation's headlines in the layout lm-evaluation-harness writes, so the tools that
read lm-eval results (leaderboard scripts, ``lm_eval``'s own table readers, W&B's lm-eval integration) read ours.

Computed from the ``results.json`` dict alone (:func:`lm_eval_results`), written beside it by
:func:`goldfish.eval.run_eval`. Tasks (documented in eval/SCHEMA.md, "lm_eval_results.json"):

* ``goldfish_extraction_<placement>`` (one per window placement, never pooled): every registered metric of the
  summary row as ``"<metric>,none"`` -- the summary value (a rate for verdicts, a mean otherwise) -- with
  ``"<metric>_stderr,none"``, lm-eval's standard error of a mean (sample standard deviation over the windows / √n);
* ``goldfish_membership``: ``"auc_<attack>,none"`` per membership attack, its stderr taken from the AUC's stratified
  bootstrap 95 % interval (half its width / 1.96; ``"N/A"`` without a bootstrap), as lm-eval bootstraps the stderr
  of metrics without a closed form.
"""

from __future__ import annotations

import math
import re
import statistics
from datetime import datetime
from typing import Any

FILE = "lm_eval_results.json"
FILTER = "none"  # lm-eval's filter name when no filter is applied: every key is "<metric>,none"
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval


def _stderr(values: list[float]) -> float | str:
    """lm-eval's ``mean_stderr``: sample standard deviation / sqrt(n); ``"N/A"`` below two values."""
    values = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else "N/A"


def _extraction_tasks(results: dict) -> dict[str, dict]:
    summary = results.get("summary") or {}
    metrics = summary.get("metrics") or {}
    windows = results.get("windows") or []
    tasks = {}
    # the members' windows (nonmembers extracted too are never pooled into a headline); older results: by_window
    by_window = (
        summary["by_split_window"].get("members") or {}
        if "by_split_window" in summary
        else summary.get("by_window") or {}
    )
    if "by_split_window" in summary:
        windows = [w for w in windows if (w.get("split") or "members") == "members"]
    for placement, row in by_window.items():
        mine = [w for w in windows if w.get("window") == placement]
        entry: dict[str, Any] = {"alias": f"goldfish_extraction_{placement}"}
        better: dict[str, bool] = {}
        for key, info in metrics.items():
            name = info["metric"]
            if row.get(key) is None:
                continue
            values = [float(w[name]) for w in mine if isinstance(w.get(name), (bool, int, float))]
            entry[f"{name},{FILTER}"] = row[key]
            entry[f"{name}_stderr,{FILTER}"] = _stderr(values)
            better[name] = bool(info["higher_is_better"])
        tasks[entry["alias"]] = {"results": entry, "higher_is_better": better, "n": row.get("n_windows", len(mine))}
    return tasks


def _membership_task(results: dict) -> dict[str, dict]:
    section = results.get("membership") or {}
    attacks = section.get("attacks") or {}
    if not attacks:
        return {}
    entry: dict[str, Any] = {"alias": "goldfish_membership"}
    for attack, row in attacks.items():
        low, high = row.get("auc_ci_low"), row.get("auc_ci_high")
        entry[f"auc_{attack},{FILTER}"] = row.get("auc")
        entry[f"auc_{attack}_stderr,{FILTER}"] = (high - low) / (2 * Z95) if None not in (low, high) else "N/A"
    n = (section.get("n_members") or 0) + (section.get("n_nonmembers") or 0)
    return {"goldfish_membership": {"results": entry, "higher_is_better": {f"auc_{a}": True for a in attacks}, "n": n}}


def lm_eval_results(results: dict) -> dict:
    """The lm-evaluation-harness layout of a ``results.json`` dict: ``results``, ``group_subtasks``, ``configs``,
    ``versions``, ``n-shot``, ``higher_is_better``, ``n-samples``, ``config`` and the provenance lm-eval records."""
    tasks = {**_extraction_tasks(results), **_membership_task(results)}
    config, model, data = results.get("config") or {}, results.get("model") or {}, results.get("data") or {}
    ex, dec = config.get("data") or {}, config.get("decoding") or {}
    device = model.get("device") or {}
    created = results.get("created")
    name = str(model.get("path") or (config.get("model") or {}).get("path") or "")
    return {
        "results": {task: t["results"] for task, t in tasks.items()},
        "group_subtasks": {task: [] for task in tasks},
        "configs": {
            task: {
                "task": task,
                "dataset_path": data.get("path"),
                "output_type": "generate_until" if task.startswith("goldfish_extraction") else "loglikelihood_rolling",
                "num_fewshot": 0,
                "metric_list": [
                    {"metric": m, "aggregation": "mean", "higher_is_better": h}
                    for m, h in t["higher_is_better"].items()
                ],
                "generation_kwargs": {"do_sample": False, "max_gen_toks": ex.get("suffix_len"), "until": []},
                "metadata": {
                    "goldfish_schema": results.get("schema"),
                    "prefix_lens": ex.get("prefix_lens"),
                    "suffix_len": ex.get("suffix_len"),
                    "stop_at_eos": dec.get("stop_at_eos"),
                    "data_sha256": data.get("sha256"),
                },
            }
            for task, t in tasks.items()
        },
        "versions": {task: results.get("schema") for task in tasks},
        "n-shot": {task: 0 for task in tasks},
        "higher_is_better": {task: t["higher_is_better"] for task, t in tasks.items()},
        "n-samples": {task: {"original": t["n"], "effective": t["n"]} for task, t in tasks.items()},
        "config": {
            "model": "goldfish",
            "model_args": f"pretrained={name}"
            + (f",revision={model['revision']}" if model.get("revision") else "")
            + f",dtype={model.get('precision')}",
            "model_num_parameters": model.get("num_parameters"),
            "model_dtype": model.get("dtype"),
            "batch_size": dec.get("batch_size"),
            "batch_sizes": [],
            "device": device.get("type"),
            "use_cache": None,
            "limit": ex.get("max_docs"),
            "bootstrap_iters": (config.get("membership") or {}).get("n_bootstrap"),
            "gen_kwargs": None,
            "random_seed": config.get("seed"),
            "numpy_seed": config.get("seed"),
            "torch_seed": config.get("seed"),
            "fewshot_seed": config.get("seed"),
        },
        "git_hash": results.get("git"),
        "date": datetime.fromisoformat(created).timestamp() if created else None,
        "transformers_version": (results.get("versions") or {}).get("transformers"),
        "model_source": "goldfish",
        "model_name": name,
        "model_name_sanitized": re.sub(r"[\"<>:/|\\\\?*\[\]]+", "__", name),
    }
