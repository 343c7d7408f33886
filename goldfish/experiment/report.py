"""The study report: ``<out>/report.md`` with headline tables and plots, and the terminal headline table.

Plots are drawn by :mod:`goldfish.eval.plots` through the adapters of :mod:`goldfish.experiment.plots` (bars per arm,
ROC per arm, metric-vs-x with a log-linear fit, and the training-loss curves -- kept vs dropped tokens, from each cell's
``metrics.jsonl``). Which plots appear depends on what the grid varies: several
model sizes -> memorisation vs size (log-x, Carlini et al.'s log-linear fit), several repetition strata ->
memorisation vs repetitions, several prefix lengths -> vs prefix length.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from goldfish.eval.report import highlight_differences, markdown_table

from ..io import atomic_write_text, read_jsonl
from .config import CONTROL, ExperimentConfig
from .inference import axis_markdown, p_text, paired_markdown
from .plots import bar_chart, loss_curves, metric_vs_x, roc_curves, threshold_plots
from .scaling import scaling_markdown
from .sections import study_sections

METRIC_NAMES = {"exact_match_rate": "exact-match rate", "rouge_l_paper": "ROUGE-L (rouge-score, the paper's)",
                "rouge_l": "ROUGE-L (token ids)", "token_match": "token match"}
ROUGE = ("rouge_l_paper", "rouge_l")  # the paper's word ROUGE-L first (the headline), token ROUGE-L beside it


def _fmt(value: Any, kind: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "params":
        return f"{value / 1e6:.2f} M" if value < 1e9 else f"{value / 1e9:.2f} B"
    if kind == "s":
        return f"{value:.0f} s"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def cell_label(cell: dict, axes: list[str], one_per_arm: bool) -> str:
    """``goldfish`` for the demo; ``goldfish model=llama-10M seed=0`` when the grid has axes."""
    if one_per_arm or not axes:
        return cell["arm"]
    return cell["arm"] + " " + " ".join(f"{a}={cell.get(a)}" for a in axes)


# Hans et al. 2024 (NeurIPS), Fig. 1: Llama-2-7B fine-tuned on 100 Wikipedia articles for 100 epochs; Goldfish k=4.
PAPER_FIG1 = {"standard": {"exact_match_rate": 0.85, "rouge_l_paper": 0.96},
              "goldfish": {"exact_match_rate": 0.0, "rouge_l_paper": 0.51},
              "control": {"exact_match_rate": 0.0, "rouge_l_paper": 0.26}}
PAPER_SETTING = "Hans et al. 2024, Fig. 1: Llama-2-7B, 100 Wikipedia articles x 100 epochs, Goldfish k=4"


def _ci(c: dict, low: str, high: str) -> str:
    return f" [{_fmt(c.get(low))}, {_fmt(c.get(high))}]" if c.get(low) is not None else ""


def _extraction(c: dict, name: str, kind: str = "") -> str:
    """A member-window mean with its 95 % interval over documents (``extraction_ci``), else the plain value."""
    d = (c.get("extraction_ci") or {}).get(name)
    if not d:
        return _fmt(c.get(METRIC_KEYS.get(name, name)), kind)
    return _with_ci(d["mean"], d.get("ci_low"), d.get("ci_high"), kind)


METRIC_KEYS = {"exact_match": "exact_match_rate"}  # per-window metric -> its summary key where they differ


def auc_text(c: dict) -> str:
    """The headline AUC with its exact p-value; a bootstrap interval only where it is not degenerate (a perfect
    separation resamples to AUC 1 every time, so its exact probability under the null stands in its place)."""
    p = c.get("mia_auc_p") or {}
    attack = c.get("mia_attack")
    if p.get("method") == "perfect":
        return (f"{_fmt(c.get('mia_auc'))} (perfect separation of {p['n_members']} vs {p['n_nonmembers']}: "
                f"p = 10^{p['log10_p']:.1f}, exact) ({attack})")
    shown = f" (p {p['p_value']:.2g}, {p['method']})" if p.get("p_value") is not None else ""
    return f"{_fmt(c.get('mia_auc'))}{_ci(c, 'mia_auc_ci_low', 'mia_auc_ci_high')}{shown} ({attack})"


def tpr_text(c: dict) -> str:
    """TPR at 1 % FPR, or why it is withheld (fewer than 100 nonmembers)."""
    if c.get("mia_tpr_at_1pct_fpr") is not None:
        return _fmt(c["mia_tpr_at_1pct_fpr"], "pct")
    return c.get("mia_tpr_at_1pct_fpr_note") or "-"


def headline_table(results: dict, markdown: bool = True) -> str:
    """Per cell: exact match and ROUGE-L (rouge-score, the headline; token ids beside) with intervals over
    documents, held-out loss, teacher-forced accuracy on kept / dropped positions, MIA AUC (the headline attack,
    with its permutation p-value), TPR at 1 % FPR where measurable, the hash-aware AUC, token budget, train time."""
    cells, axes = results["cells"], results["axes"]
    one = len({c["arm"] for c in cells}) == len(cells)
    header = ["cell", "params", "tokens", "train time", "exact match", "ROUGE-L (rouge-score)", "ROUGE-L (tokens)",
              "held-out loss", "TF acc kept / dropped", "MIA AUC", "TPR at 1 % FPR", "MIA AUC kept tokens",
              "final kept / dropped loss"]
    rows = []
    for c in cells:
        kept = c.get("mia_auc_kept_reference") if c.get("mia_auc_kept_reference") is not None else \
            c.get("mia_auc_kept_loss")
        rows.append([cell_label(c, axes, one), _fmt(c.get("params"), "params"), _fmt(c.get("tokens_seen"), "int"),
                     _fmt(c.get("train_time_s"), "s"), _extraction(c, "exact_match", "pct"),
                     _extraction(c, "rouge_l_paper"), _extraction(c, "rouge_l"), _fmt(c.get("heldout_loss")),
                     f"{_fmt(c.get('tf_kept_accuracy'), 'pct')} / {_fmt(c.get('tf_dropped_accuracy'), 'pct')}",
                     auc_text(c), tpr_text(c), _fmt(kept),
                     f"{_fmt(c.get('final_kept_loss'))} / {_fmt(c.get('final_dropped_loss'))}"])
    if markdown:
        return markdown_table(header, rows)
    return _plain(header, rows)


def _plain(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header)] + [fmt.format(*r) for r in rows])


SPREAD_METRICS = (("exact_match_rate", "exact match", "pct"), ("rouge_l_paper", "ROUGE-L rouge-score", ""),
                  ("rouge_l", "ROUGE-L tokens", ""),
                  ("heldout_loss", "held-out loss", ""), ("tf_kept_accuracy", "TF acc kept", "pct"),
                  ("tf_dropped_accuracy", "TF acc dropped", "pct"), ("mia_auc", "MIA AUC", ""),
                  ("mia_auc_kept_reference", "MIA AUC kept tokens", ""))


def arm_means(results: dict) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Per arm, per metric: (mean, sample standard deviation, n cells) over the arm's cells (e.g. seeds)."""
    out: dict[str, dict[str, tuple[float, float, int]]] = {}
    for arm in dict.fromkeys(c["arm"] for c in results["cells"]):
        cells = [c for c in results["cells"] if c["arm"] == arm]
        out[arm] = {}
        for key, _, _ in SPREAD_METRICS:
            values = [c[key] for c in cells if c.get(key) is not None]
            if values:
                mean = sum(values) / len(values)
                sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
                out[arm][key] = (mean, sd, len(values))
    return out


def spread_table(results: dict) -> str | None:
    """Mean +- standard deviation over each arm's cells (seeds, splits), when some arm has several cells."""
    if len({c["arm"] for c in results["cells"]}) == len(results["cells"]):
        return None
    means = arm_means(results)
    rows = []
    for arm, metrics in means.items():
        n = max((v[2] for v in metrics.values()), default=0)
        rows.append([arm, str(n)] + [f"{_fmt(metrics[k][0], kind)} +- {_fmt(metrics[k][1], kind)}"
                                     if k in metrics else "-" for k, _, kind in SPREAD_METRICS])
    return markdown_table(["arm", "cells"] + [name for _, name, _ in SPREAD_METRICS], rows)


def paper_table(results: dict, markdown: bool = True) -> str | None:
    """Ours (mean over the arm's cells) beside the paper's Fig. 1 for the arms standard / goldfish / control."""
    rows = []
    for arm, metrics in arm_means(results).items():
        paper = PAPER_FIG1.get(arm)
        if paper is None:
            continue
        em, rl, tok = (metrics.get(k) for k in ("exact_match_rate", *ROUGE))
        rows.append([arm, _fmt(em[0] if em else None, "pct"), _fmt(paper["exact_match_rate"], "pct"),
                     _fmt(rl[0] if rl else None), _fmt(paper["rouge_l_paper"]), _fmt(tok[0] if tok else None)])
    if not rows:
        return None
    header = ["arm", "exact match (ours)", "exact match (paper)", "ROUGE-L rouge-score (ours)", "ROUGE-L (paper)",
              "ROUGE-L token ids (ours)"]
    return markdown_table(header, rows) if markdown else _plain(header, rows)


def regime(results: dict) -> str:
    """One sentence: fine-tuned from which model, or trained from scratch; and the blind baseline."""
    start = results.get("start_model")
    trained = results.get("control_mode") == "background"
    if start:
        control = ("that model fine-tuned on the background alone" if trained else
                   "that model, not fine-tuned on the target data (its pretraining may have included them)")
        text = f"Regime: fine-tuning the pretrained model `{Path(start).name}`; the control is {control}."
    else:
        control = ("the same model trained on the same background without the targets" if trained
                   else "the untrained initial weights")
        text = f"Regime: trained from scratch; the control is {control}."
    if results.get("blind_auc") is not None:
        low, high = results.get("blind_auc_ci") or (None, None)
        text += (f" Blind baseline (zlib ratio of the text alone, no model): AUC {_fmt(results['blind_auc'])} "
                 f"[{_fmt(low)}, {_fmt(high)}] -- near 0.5 means members and nonmembers do not differ in kind, so "
                 "a model's AUC above it measures membership, not a distribution shift.")
    return text


def exposure_table(results: dict) -> str | None:
    """MIA AUC per exposure count (members with r copies vs all nonmembers) with its 95 % bootstrap CI, per cell,
    when there are >= 2 counts."""
    counts = sorted({int(r) for c in results["cells"] for r in (c.get("mia_by_exposure") or {})})
    if len(counts) < 2:
        return None
    one = len({c["arm"] for c in results["cells"]}) == len(results["cells"])
    rows = []
    for c in results["cells"]:
        by, ci = c.get("mia_by_exposure") or {}, c.get("mia_by_exposure_ci") or {}
        attack = c.get("mia_attack")
        row = [cell_label(c, results["axes"], one)]
        for r in counts:
            low, high = (ci.get(str(r)) or {}).get(attack) or (None, None)
            row.append(_fmt((by.get(str(r)) or {}).get(attack)) + _ci({"low": low, "high": high}, "low", "high"))
        rows.append(row)
    return markdown_table(["cell"] + [f"{r}x" for r in counts], rows)


def _with_ci(value: Any, low: Any, high: Any, kind: str = "") -> str:
    return _fmt(value, kind) + (f" [{_fmt(low, kind)}, {_fmt(high, kind)}]" if low is not None else "")


def _rate(c: dict, key: str, low: str = "", high: str = "") -> str:
    """A rate in percent with its 95 % interval (``<key>_ci_low``/``_ci_high`` unless named)."""
    return _with_ci(c.get(key), c.get(low or f"{key}_ci_low"), c.get(high or f"{key}_ci_high"), "pct")


def adaptive_table(results: dict) -> str | None:
    """Greedy exact match beside eval's adaptive extraction attacks (beam search, temperature sampling) per cell;
    None when no cell ran them."""
    cells = results["cells"]
    if not any(c.get(k) is not None for c in cells for k in ("beam_exact_match_rate", "sample_rate")):
        return None
    one = len({c["arm"] for c in cells}) == len(cells)
    rows = [[cell_label(c, results["axes"], one), _fmt(c.get("n_windows"), "int"),
             _rate(c, "exact_match_rate", "exact_match_ci_low", "exact_match_ci_high"),
             _rate(c, "beam_exact_match_rate") + (f" (beam {c['beam_width']})" if c.get("beam_width") else ""),
             _rate(c, "sample_rate"),
             _rate(c, "sample_any_rate") + (f" ({c['n_samples']} samples, T={c.get('sample_temperature')})"
                                            if c.get("n_samples") else "")] for c in cells]
    return markdown_table(["cell", "windows", "greedy exact match", "beam exact match", "sample rate",
                   "any sample exact"], rows)


def _boot(r: dict | None) -> str:
    """A rate over windows or positions with its interval over documents (``cluster_bootstrap_mean``'s dict)."""
    r = r or {}
    return _with_ci(r.get("mean"), r.get("ci_low"), r.get("ci_high"), "pct")


def adversary_table(results: dict) -> str | None:
    """Eval's mask-consistent extraction attack per cell (and placement, prefix length) beside greedy decoding: exact
    match of each with the McNemar p against greedy, accuracy on the dropped suffix positions decoded and teacher-
    forced; None when no cell ran it."""
    cells = [c for c in results["cells"] if (c.get("adversary") or {}).get("rows")]
    if not cells:
        return None
    one = len({c["arm"] for c in results["cells"]}) == len(results["cells"])
    rows = []
    for c in cells:
        adv = c["adversary"]
        mask = adv.get("mask") or {}
        for r in adv["rows"]:
            em, acc, test = r.get("exact_match") or {}, r.get("dropped_accuracy") or {}, r.get("mcnemar_vs_greedy") or {}
            rows.append([cell_label(c, results["axes"], one),
                         f"k={mask.get('k')} h={mask.get('h')} {mask.get('strategy')}",
                         f"{r.get('window')} {_prefix(r.get('prefix_len'))}", _fmt(r.get("n_windows"), "int"),
                         _fmt(r.get("n_dropped"), "int"), _boot(em.get("greedy")),
                         *(f"{_boot(em.get(v))} (p {p_text((test.get(v) or {}).get('p_value'))})"
                           for v in ("mc_oracle", "mc_switch")),
                         *(_boot(acc.get(v)) for v in ("greedy", "mc_oracle", "mc_switch", "tf", "tf_oracle"))])
    return markdown_table(["cell", "mask assumed", "window", "windows", "dropped positions", "exact match greedy",
                           "mask-consistent, told (p vs greedy)", "mask-consistent, switch (p vs greedy)",
                           "dropped acc. greedy", "told", "switch", "teacher-forced", "teacher-forced told"], rows)


def _prefix(p: Any) -> str:
    return "all" if p == -1 else f"prefix {p}"


def _did(d: dict | None, kind: str = "") -> str:
    """A difference in differences with its 95 % interval and bootstrap p-value."""
    if not d or d.get("did") is None:
        return "-"
    p = f" (p {p_text(d['p_value'])})" if d.get("p_value") is not None else ""
    return _with_ci(d["did"], d.get("ci_low"), d.get("ci_high"), kind) + p


def _leakage_rows(label: str, leakage: dict) -> list[list[str]]:
    """Per position set (dropped, kept): the members-only arm - control beside the held-out one and their
    difference in differences, for top-1 accuracy and loss."""
    rows = []
    for positions in ("dropped", "kept"):
        plain, did = leakage[positions], (leakage.get("did") or {}).get(positions) or {}
        acc, loss = plain.get("accuracy") or {}, plain["loss"]
        dacc, dloss = did.get("accuracy") or {}, did.get("loss") or {}
        held = f"{_fmt(dloss.get('n_heldout_documents'), 'int')}" if dloss else "-"
        rows.append([label, positions, f"{_fmt(loss['n_documents'], 'int')} / {held}",
                     f"{_fmt(acc.get('arm'), 'pct')} / {_fmt(acc.get('control'), 'pct')}",
                     _with_ci(acc.get("diff"), acc.get("diff_ci_low"), acc.get("diff_ci_high"), "pct"),
                     _fmt(dacc.get("heldout_diff"), "pct"), _did(dacc, "pct"),
                     _with_ci(loss["diff"], loss["diff_ci_low"], loss["diff_ci_high"]),
                     _fmt(dloss.get("heldout_diff")), _did(dloss)])
    return rows


def leakage_section(results: dict) -> list[str]:
    """The dropped-token leakage audit: each cell against the control of its grid point, on the member positions
    the Goldfish mask drops / keeps and on held-out text, as a difference in differences (a table), and a line for
    each grid point without a control; empty when no cell has an attacks.json."""
    cells, axes = results["cells"], results["axes"]
    arms = [c for c in cells if c["arm"] != CONTROL]
    if not any("tf_accuracy" in c for c in arms):
        return []

    def point(c: dict) -> tuple:
        return tuple(c.get(a) for a in axes)

    controls = {point(c) for c in cells if c["arm"] == CONTROL}
    one = len({c["arm"] for c in cells}) == len(cells)
    rows, notes = [], []
    for c in arms:
        label = cell_label(c, axes, one)
        if point(c) not in controls:
            continue
        if not c.get("leakage"):
            notes.append(f"{label}: no Goldfish mask on its data, so no dropped positions to audit.")
            continue
        rows += _leakage_rows(label, c["leakage"])
    for values in dict.fromkeys(point(c) for c in arms if point(c) not in controls):
        where = " ".join(f"{a}={v}" for a, v in zip(axes, values))
        notes.append(f"No control cell {f'at {where}' if where else 'in this experiment'} (`control: false`): "
                     "no leakage audit there.")
    lines = ["## Dropped-token leakage audit (difference in differences)", ""]
    if rows:
        lines += [markdown_table(["cell", "positions", "documents members / held-out", "accuracy arm / control",
                                  "accuracy arm - control, members (old reading)", "accuracy arm - control, held-out",
                                  "accuracy DiD", "loss arm - control, members (old reading)",
                                  "loss arm - control, held-out", "loss DiD"], rows), "",
                  "Top-1 accuracy and loss (-log p, nats) of the cell and of the control of its grid point (a model "
                  "that never saw the text), token-weighted, on the member positions the Goldfish mask drops / "
                  "keeps (the same positions in every arm) and on every held-out (nonmember) target. Training moves "
                  "a model on text it never saw as well, so arm - control on the members alone (the old reading, "
                  "kept for comparison) mixes leakage with that shift. The audit is the difference in differences: "
                  "(arm - control on the member positions) - (arm - control on held-out text), with a 95 % "
                  "bootstrap CI and two-sided p-value resampling member and held-out documents. On dropped "
                  "positions a DiD in accuracy above 0 (in loss below 0) with a CI excluding 0 means the model "
                  "predicts the tokens it was never trained on better than its general shift explains: leakage "
                  "through the context (or, for a standard arm, plain memorisation).", ""]
    return lines + [line for note in notes for line in (note, "")]


def stratum_table(results: dict, by: str) -> str:
    """Rows: cells; columns: values of ``by`` (prefix_len or repetitions); entries: exact match % / ROUGE-L."""
    cells, axes = results["cells"], results["axes"]
    one = len({c["arm"] for c in cells}) == len(cells)
    values = sorted({s[by] for c in cells for s in c["strata"] if s[by] is not None})
    header = ["cell"] + [f"{by}={'all' if by == 'prefix_len' and v == -1 else v}" for v in values]
    rows = []
    for c in cells:
        agg = _mean_over(c["strata"], by)
        rows.append([cell_label(c, axes, one)] + [
            f"{_fmt(agg[v]['exact_match_rate'], 'pct')} / {_fmt(agg[v]['rouge_l_paper'])} / "
            f"{_fmt(agg[v]['rouge_l'])}" if v in agg else "-"
            for v in values])
    return markdown_table(header, rows)


def _mean_over(strata: list[dict], by: str) -> dict[Any, dict[str, float]]:
    """Window-weighted means of the stratum metrics grouped by one key (the other key is pooled)."""
    acc: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in strata:
        n = s["n_windows"]
        acc[s[by]]["n"] += n
        for m in MEANED:
            if s.get(m) is not None:
                acc[s[by]][m] += n * s[m]
                acc[s[by]][f"n_{m}"] += n
    return {k: {m: (v[m] / v[f"n_{m}"] if v[f"n_{m}"] else None) for m in MEANED} for k, v in acc.items()}


MEANED = ("exact_match_rate", *ROUGE, "token_match")  # the stratum metrics the tables pool


def repetition1_table(results: dict) -> str | None:
    """Memorisation of documents with one copy per epoch (repetitions = 1) per cell; read ``epochs`` times in all
    (the train summary's ``exposures``), so it is single-exposure memorisation only for a one-epoch budget."""
    cells, axes = results["cells"], results["axes"]
    rows = []
    for c in sorted(cells, key=lambda c: (c["arm"], c.get("params") or 0)):
        agg = _mean_over(c["strata"], "repetitions")
        if 1 in agg:
            rows.append([cell_label(c, axes, False), _fmt(c.get("params"), "params"),
                         _fmt(agg[1]["exact_match_rate"], "pct"), _fmt(agg[1]["rouge_l_paper"]),
                         _fmt(agg[1]["rouge_l"])])
    if not rows:
        return None
    return markdown_table(["cell", "params", "exact match (rep. 1)", "ROUGE-L rouge-score (rep. 1)",
                           "ROUGE-L tokens (rep. 1)"], rows)


def k_baseline_table(results: dict) -> str | None:
    """Goldfish cells: exact match next to the mask-arithmetic baseline from each window's own dropped count, mean
    of (1 - g)^d_w, and the nominal (1 - g/k)^S (``goldfish.eval.baseline``)."""
    cells, axes = results["cells"], results["axes"]
    one = len({c["arm"] for c in cells}) == len(cells)
    rows = []
    for c in cells:
        kb = c.get("k_baseline")
        if not kb:
            continue
        exact = {str(p): v.get("exact_match_rate") for p, v in (c.get("by_prefix_len") or {}).items()}
        for r in kb["rows"]:
            shown = str(r["prefix_len"]) if r["prefix_len"] > 0 else "all"
            rows.append([cell_label(c, axes, one), f"{kb['strategy']} k={kb['k']}", shown,
                         _fmt(exact.get(str(r["prefix_len"])), "pct"), _fmt(r.get("baseline_windows"), "pct"),
                         _fmt(r.get("baseline_nominal", r.get("baseline")), "pct"), _fmt(r["g"]),
                         _fmt(r["kept_acc"], "pct"), _fmt(r["n_dropped"], "int"),
                         f"{_fmt(r.get('n_windows_no_drop'), 'int')} / {_fmt(r['n_windows'], 'int')}"])
    if not rows:
        return None
    return markdown_table(["cell", "mask", "prefix", "exact match", "baseline mean (1-g)^d_w (actual counts)",
                           "nominal (1-g/k)^S", "g (dropped missed)", "kept-token acc.", "dropped positions",
                           "windows without a dropped token"], rows)


def _examples(cfg: ExperimentConfig, results: dict) -> str:
    """A few side-by-side generations per arm (same documents in every arm), mismatches highlighted."""
    if cfg.report_examples <= 0:
        return ""
    first: dict[str, dict] = {}
    for c in results["cells"]:
        first.setdefault(c["arm"], c)
    parts = []
    chosen: list[tuple] | None = None
    for arm, c in first.items():
        path = Path(cfg.out_dir) / "cells" / c["cell"] / "eval" / "results.json"
        windows = [w for w in json.loads(path.read_text(encoding="utf-8"))["windows"]
                   if w.get("split") in (None, "members")]
        if chosen is None:
            chosen = [(w["doc_id"], w["prefix_len"]) for w in windows[: cfg.report_examples]]
        by_key = {(w["doc_id"], w["prefix_len"]): w for w in windows}
        parts.append(f"### {arm}\n")
        for key in chosen:
            w = by_key.get(key)
            if w is None:
                continue
            gen, truth = highlight_differences(w["generation"], w["truth"])
            verdict = "verbatim" if w["exact_match"] else \
                f"ROUGE-L {w.get('rouge_l_paper', w['rouge_l']):.2f} (rouge-score), {w['rouge_l']:.2f} (tokens)"
            parts.append(f"**{w.get('title') or w['doc_id']}** (prefix {w['prefix_len']} tokens, {verdict})\n\n"
                         f"- generated: {gen}\n- truth: {truth}\n")
    return "\n".join(parts)


def provenance_line(cells: list[dict]) -> str:
    """Where the numbers were computed: device, resolved precisions, versions, code commit (from the cells)."""
    def values(key: str) -> str:
        found = sorted({str(c[key]) for c in cells if c.get(key)})
        return " / ".join(found) or "-"

    device = next((c["device"] for c in cells if c.get("device")), {}) or {}
    where = device.get("name", "unknown device")
    if device.get("type") == "cpu":
        where += f", {device.get('threads')} threads, ATen {device.get('aten_capability')}"
    bf16 = f"native bf16: {'yes' if device.get('native_bf16') else 'no'} ({device.get('bf16_reason', '?')})"
    versions = next((c["versions"] for c in cells if c.get("versions")), {}) or {}
    shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    # the code version names the commit of a git checkout, else a hash of the sources (goldfish.provenance)
    code = next((c.get("code") or c["git"][:12] for c in cells if c.get("code") or c.get("git")), None)
    return (f"Computed on {where}; {bf16}. Training precision {values('precision')}, evaluation precision "
            f"{values('eval_precision')} (precision=auto resolved on this device). {shown}"
            + (f"; code {code}" if code else "") + ".")


def write_study_report(cfg: ExperimentConfig, results: dict, out: Path) -> Path:
    """Write report.md (+ PNGs) for the finished cells; returns the report path."""
    out = Path(out)
    cells = results["cells"]
    lines = [f"# Experiment `{results['experiment']}`", ""]
    if results.get("description"):
        lines += [results["description"], ""]
    took = f" (this session: {results['wall_time_s']:.0f} s)" if results.get("wall_time_s") else ""
    lines += [f"{results['n_done']} of {results['n_cells']} cells finished{took}"
              + (f"; missing: {', '.join(results['missing'])}" if results["missing"] else "") + ".", ""]
    if cells:
        lines += [provenance_line(cells), ""]
    if not cells:
        atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
        return out / "report.md"
    lines += ["## Headline", "", regime(results), "", headline_table(results), "",
              "Exact match and ROUGE-L: mean over the member windows with a 95 % bootstrap interval that resamples "
              "documents (windows of one document, e.g. at two prefix lengths, are not independent). ROUGE-L "
              "(rouge-score) is the paper's: word-level ROUGE-L F1 of the decoded texts by the rouge-score package "
              "(lower-cased words, no stemming, as the paper's evaluation calls it); ROUGE-L (tokens) is the same "
              "F1 on token ids. "
              "MIA AUC: members (trained text) vs nonmembers, 95 % bootstrap CI and the one-sided permutation "
              "p-value of an AUC at least this large (exact without ties up to 400 documents; at AUC 1 the exact "
              "1 / C(m + n, m), shown instead of the degenerate bootstrap interval); 0.5 = chance. TPR at 1 % FPR "
              "is shown only with at least 100 nonmembers (below that it is the TPR at zero false positives). "
              "The attack is named in brackets (reference = target NLL calibrated by the starting model, i.e. the "
              "control; loss = plain NLL). MIA AUC kept tokens: the hash-aware attack, scoring only the targets the Goldfish mask "
              "keeps (the hash is public). TF acc kept / dropped: teacher-forced top-1 accuracy of the member "
              "tokens at the positions the Goldfish mask keeps / drops (the same positions in every arm): a "
              "Goldfish model that fills dropped tokens back in shows it here. With `later_chunk` nonmembers "
              "(openings vs bodies of the same articles) a shift in kind separates the sets without any "
              "memorisation: compare arms rather than reading the absolute AUC. "
              "Held-out loss: mean per-token NLL of the nonmember text (lower = better language model; compare "
              "with the control's).", ""]
    paper = paper_table(results) if cfg.paper_numbers else None
    if paper:
        lines += ["## Beside the paper", "", f"{PAPER_SETTING}; ours: the setting above.", "", paper, "",
                  "The paper's model is 50x larger and saw 100 epochs; compare the ordering (control < Goldfish < "
                  "standard in ROUGE-L, exact match only for standard), not the decimals. ROUGE-L is compared as the "
                  "paper computes it (rouge-score on the decoded words); our token-id ROUGE-L is beside it.", ""]
    spread = spread_table(results)
    if spread:
        lines += ["## Mean +- standard deviation over each arm's cells", "", spread, ""]
    scaling = scaling_markdown(results)
    if scaling:
        lines += ["## Memorisation vs model size (Carlini et al. 2022)", "", scaling, ""]
    lines += study_sections(results)  # E50, canaries, per-stratum membership (goldfish.experiment.sections)
    exposure = exposure_table(results)
    if exposure:
        lines += ["## MIA AUC by exposure count", "", exposure, "",
                  "Members with r copies vs all nonmembers, 95 % bootstrap CI in brackets; the attack is the "
                  "headline one of each cell.", ""]
    lines += leakage_section(results)
    lines += paired_markdown(results.get("paired") or [], results["axes"])
    lines += axis_markdown(results.get("paired_axis") or [], cfg.compare.pool)
    adaptive = adaptive_table(results)
    if adaptive:
        lines += ["## Adaptive extraction attacks (beam search, sampling)", "", adaptive, "",
                  "Exact match of the suffix by greedy decoding, by beam search, and by temperature samples (sample "
                  "rate: mean fraction of a window's samples that reproduce it; any sample exact: windows with at "
                  "least one). 95 % intervals: Wilson for rates over windows, normal for the mean sample rate.", ""]
    mask_consistent = adversary_table(results)
    if mask_consistent:
        lines += ["## Mask-consistent extraction (the Goldfish hash as the attacker's side information)", "",
                  mask_consistent, "",
                  "At a suffix position believed dropped, the continuation keeps only the candidates whose hash "
                  "window (the h tokens ending at the candidate) the mask drops. Told: the attacker knows which "
                  "positions are dropped (an upper bound); switch: it believes a position dropped where the model's "
                  "top-1 probability is below the switch threshold. p: exact McNemar test against greedy on the same "
                  "windows. Dropped acc.: accuracy on the dropped suffix positions (decoded continuations, then "
                  "teacher-forced on the true prefix). 95 % intervals resample documents.", ""]
    for by, title in (("prefix_len", "By prefix length"), ("repetitions", "By repetition count")):
        lines += [f"## {title} (exact match / ROUGE-L rouge-score / ROUGE-L tokens)", "", stratum_table(results, by),
                  ""]
    single = repetition1_table(results)
    if single and len({s["repetitions"] for c in cells for s in c["strata"]}) > 1:
        lines += ["## Repetition-1 memorisation (one copy in the training data, seen once per epoch)", "",
                  single, ""]
    baseline = k_baseline_table(results)
    if baseline:
        lines += ["## Exact match against the mask baseline", "", baseline, "",
                  "g: fraction of the suffix positions the cell's own mask dropped whose teacher-forced argmax is "
                  "wrong. The baseline is the exact-match rate of a model that misses those and nothing else: the "
                  "mean over windows of (1-g)^d_w, d_w the dropped targets in window w's suffix as the mask "
                  "actually placed them. The nominal (1-g/k)^S beside it assumes every target is dropped with "
                  "probability 1/k; it is the headline only where the windows' counts follow that. Exact match near "
                  "the baseline is explained by the mask arithmetic alone, far below it by missed kept tokens "
                  "(kept-token accuracy < 100 %), above it by misses that are not independent.", ""]
    plots = make_plots(cfg, results, out)
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    examples = _examples(cfg, results)
    if examples:
        lines += ["## Side-by-side generations (differences in bold / struck through)", "", examples]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def mia_attack_name(cells: list[dict]) -> str:
    """The headline attack of these cells for a title: its name, or the names joined when cells differ (e.g. a grid
    mixing fine-tunes and from-scratch cells under ``mia_attack: auto``)."""
    return " / ".join(dict.fromkeys(str(c.get("mia_attack")) for c in cells))


def make_plots(cfg: ExperimentConfig, results: dict, out: Path) -> list[Path]:
    """Every plot the grid supports (see the module docstring)."""
    cells, axes = results["cells"], results["axes"]
    one = len({c["arm"] for c in cells}) == len(cells)
    label = {c["cell"]: cell_label(c, axes, one) for c in cells}
    metric = cfg.headline_metric
    paths: list[Path] = []
    if len(cells) <= 16:
        for m in ("exact_match_rate", *ROUGE):
            paths.append(bar_chart({label[c["cell"]]: c.get(m) for c in cells}, METRIC_NAMES[m] + " per arm",
                                   METRIC_NAMES[m], out / f"{m}_by_arm.png"))
        attack = mia_attack_name(cells)
        paths.append(bar_chart({label[c["cell"]]: c.get("mia_auc") for c in cells}, "membership inference AUC "
                               f"({attack} attack, 95 % CI)", "ROC-AUC (0.5 = chance)", out / "mia_auc_by_arm.png",
                               errors={label[c["cell"]]: (c.get("mia_auc_ci_low"), c.get("mia_auc_ci_high"))
                                       for c in cells}))
        paths.append(bar_chart({label[c["cell"]]: c.get("heldout_loss") for c in cells},
                               "held-out (nonmember) loss per arm", "mean NLL (nats/token)",
                               out / "heldout_loss_by_arm.png"))
        roc = {label[c["cell"]]: c["mia_roc"] for c in cells if c.get("mia_roc")}
        if roc:
            paths.append(roc_curves(roc, attack, out / "roc_by_arm.png"))
        metrics = {c["cell"]: Path(cfg.out_dir) / "cells" / c["cell"] / "train" / "metrics.jsonl" for c in cells}
        curves = {label[cell]: read_jsonl(path) for cell, path in metrics.items() if path.is_file()}  # not control
        paths.append(loss_curves(curves, out / "loss_curves.png"))
    for m in dict.fromkeys((metric, *ROUGE)):  # exact match is all-or-nothing; ROUGE-L shows partial recall
        paths += metric_vs_x(cells, m, METRIC_NAMES[m], out)
    paths += threshold_plots(results, out)
    return [p for p in paths if p is not None]
