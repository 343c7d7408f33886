"""The exposure threshold of a size sweep: E50 per size and arm (a logistic fit of exact match on log2 exposures
read with its profile-likelihood interval, or the identified range where the strata separate,
:func:`goldfish.experiment.scaling.group_e50`), the joint model of the size effect (one logistic regression on log2
exposures and log10 parameters, :func:`goldfish.experiment.scaling.size_model`), and the canaries' Secret-Sharer
exposure per stratum (computed into the ``scaling`` block by :mod:`goldfish.experiment.sections.size`).
"""

from __future__ import annotations

import math

from goldfish.eval.tables import markdown_section, markdown_table

from ..summary import Study


def compute(study: Study) -> dict:
    return {}


def _one(e: dict, value: float | None, status: str) -> str:
    """One E50 value of ``e``'s fit: censored as ``> 128`` / ``< 2`` beyond the tested exposures."""
    if status == "above":
        return f"> {max(s['exposures'] for s in e['strata']):g}"
    if status == "below":
        return f"< {min(s['exposures'] for s in e['strata']):g}"
    return "-" if value is None else f"{value:.3g}"


def _e50_point(e: dict) -> str:
    """``12.3``, ``> 128``, ``12.3 (quasi-separated)`` or ``16-64 (identified)`` where the strata separate."""
    if e["status"] == "separated":
        return f"{e['identified'][0]:g}-{e['identified'][1]:g} (identified)"
    return _one(e, e["e50"], e["status"]) + (" (quasi-separated)" if e.get("separation") == "quasi" else "")


def _e50_text(e: dict | None) -> str:
    """``12.3 [8.1, 20.5]``; censored values as ``> 128`` / ``< 2``; a separation as ``16-64 (identified) [16, 64]``."""
    if not e:
        return "-"
    return f"{_e50_point(e)} [{_one(e, e['low'], e['low_status'])}, {_one(e, e['high'], e['high_status'])}]"


def e50_runs_markdown(rows: list[dict], tuned: str | None) -> list[str]:
    """E50 per training run (one column per run, labelled by its values other than size and a tuned axis) and the
    geometric mean over runs with its t interval (or why there is none); [] without a group of several runs."""
    rows = [r for r in rows if r.get("e50_runs")]
    if not any(len(r["e50_runs"]) > 1 for r in rows):
        return []

    def label(values: dict) -> str:
        return ", ".join(f"{k}={v}" for k, v in values.items() if k != tuned)

    runs = list(dict.fromkeys(label(x["values"]) for r in rows for x in r["e50_runs"]))
    table = []
    for r in rows:
        by = {label(x["values"]): x["e50"] for x in r["e50_runs"]}
        over = r["e50_over_runs"]
        across = (
            f"{over['geo_mean']:.3g} [{over['ci_low']:.3g}, {over['ci_high']:.3g}]; SD {over['sd_log2']:.2f}"
            if "geo_mean" in over
            else over["why_not"]
        )
        table.append([r["arm"], r["size"], *(_e50_point(by[k]) if by.get(k) else "-" for k in runs), across])
    return [
        "",
        "E50 per training run (each run's own fit, 95 % profile interval in results.json), and over runs: "
        "the geometric mean with a 95 % t interval over runs on log2 E50 and the between-run SD (log2 units), "
        "only where every run has an E50 inside the tested exposures. The pooled E50 above fits every run's "
        "targets as one sample (within-run detail).",
        "",
        markdown_table(["arm", "size", *runs, "over runs [95 % t]"], table),
    ]


def _ci(entry: dict, name: str, digits: str = ".2f", sign: bool = False) -> str:
    value, low, high = entry["coef"][name], entry["ci_low"].get(name), entry["ci_high"].get(name)
    f = ("+" if sign else "") + digits
    return f"{value:{f}} [{low:{f}}, {high:{f}}]" if low is not None else f"{value:{f}}"


def _derived(d: dict | None, digits: str = ".3g", sign: bool = False) -> str:
    if not d or d.get("value") is None or not math.isfinite(d["value"]):
        return "-"
    f = ("+" if sign else "") + digits
    ends = "" if d.get("ci_low") is None else f" [{d['ci_low']:{f}}, {d['ci_high']:{f}}]"
    return f"{d['value']:{f}}{ends}"


def size_model_markdown(models: list[dict], runs: list[dict] | None = None) -> list[str]:
    """The joint model's table: per arm its coefficients with cluster-bootstrap intervals, the E50 elasticity and
    the size coefficient per seed; and the model's E50 per size -- left out for an arm whose log-linearity the
    run-level F test (``scaling.size_runs``) rejects: that model is then the wrong one, and its E50 per size
    contradicts the per-size fits above."""
    if not models:
        return []
    rejected = {r.get("arm") for r in runs or [] if ((r.get("linearity") or {}).get("p_value") or 1.0) < 0.05}
    rows, e50_rows = [], []
    for m in models:
        if "why_not" in m:
            rows.append([m["arm"], f"{m['n_events']}/{m['n_rows']}", m["why_not"], "-", "-", "-"])
            continue
        splits = ", ".join(f"{s['coef']:+.2f} [{s['ci_low']:+.2f}, {s['ci_high']:+.2f}]" for s in m["by_split"])
        rows.append(
            [
                m["arm"],
                f"{m['n_events']}/{m['n_rows']} ({m['n_clusters']} targets)",
                _ci(m, "log10_params", sign=True),
                _ci(m, "log2_exposures"),
                _derived(m["derived"].get("e50_elasticity"), ".2f", sign=True),
                splits or "-",
            ]
        )
        if m["arm"] in rejected:
            e50_rows.append([m["arm"]] + ["- (log-linearity rejected)" for _ in m["sizes"]])
        else:
            e50_rows.append([m["arm"]] + [_derived(m["derived"].get(f"e50_{s}")) for s in m["sizes"]])
    sizes = list(dict.fromkeys(s for m in models if "why_not" not in m for s in m["sizes"]))
    lines = [
        "",
        "The size effect in ONE model: logit P(exact) = a + b log2(exposures read) + c log10(params), fitted "
        "to every target window of the from-scratch sizes (Firth-penalised), with 95 % intervals from a cluster "
        "bootstrap that resamples targets (each with all its sizes) within seed x stratum. c > 0: a larger "
        "model extracts more at the same exposures. The E50 elasticity -log10(2) c / b is d log10 E50 / d "
        "log10 params (< 0: larger models need fewer exposures). Per seed: c fitted to that seed's targets "
        "alone. The intervals resample targets: they hold the targets' variation, and the training runs' "
        "only through the seeds' agreement.",
        "",
        markdown_table(
            [
                "arm",
                "extracted / target windows",
                "c: size (logit per 10x params)",
                "b: exposures (logit per doubling)",
                "E50 elasticity",
                "c per seed",
            ],
            rows,
        ),
    ]
    if e50_rows:
        lines += [
            "",
            "E50 the joint model implies per size [95 % cluster-bootstrap interval]; not shown for an arm "
            "whose log-linearity the run-level F test rejects (p < 0.05): read the per-size fits above:",
            "",
            markdown_table(["arm"] + sizes, e50_rows),
        ]
    return lines


def threshold_markdown(results: dict) -> str | None:
    """The report's section on the exposure threshold E50 (per size and arm, the joint model of the size effect)
    and the canaries' Secret-Sharer exposure; None when no row has either."""
    scaling = results.get("scaling") or {}
    rows = scaling.get("rows") or []
    if not any(r.get("e50") or r.get("canaries") for r in rows):
        return None
    ordered = sorted(
        rows, key=lambda r: (r["arm"] != "control", r["arm"], r.get("pretrained", False), r["params"] or 0)
    )
    lines = [
        "E50: the exposures at which half of the targets are extracted (exact match), from a logistic fit of "
        "exact match on log2 exposures read, with its 95 % profile-likelihood interval (the slope profiled "
        "out, separation included). Where the strata separate (none extracted up to one stratum, all from the "
        "next) the data identify E50 only as the range between them: shown as `a-b (identified)`, never as a "
        "point; `quasi-separated`: one mixed stratum between separated ones, whose exposure is then the "
        "estimate. Censored as > max / < min where the rate stays below / above one half over the tested "
        "exposures.",
        "",
    ]
    table = [
        [
            r["arm"],
            r["size"] + (" (pretrained)" if r.get("pretrained") else ""),
            f"{(r['params'] or 0) / 1e6:.2f} M",
            _e50_text(r.get("e50")),
            "-" if not r.get("e50") else " / ".join(f"{s['extracted']}" for s in r["e50"]["strata"]),
            "-" if not r.get("e50") else str(r["e50"]["n_targets"]),
        ]
        for r in ordered
        if r["arm"] != "control"
    ]
    lines.append(markdown_table(["arm", "size", "params", "E50 [95 % CI]", "extracted per stratum", "targets"], table))
    lines += e50_runs_markdown(ordered, (results.get("tune") or {}).get("axis"))
    lines += size_model_markdown(scaling.get("size_model") or [], scaling.get("size_runs") or [])
    lines += canary_markdown(ordered)
    return "\n".join(lines)


def canary_markdown(rows: list[dict]) -> list[str]:
    """The canary table: mean Secret-Sharer exposure per stratum and row, with its interval."""
    found = [r for r in rows if r.get("canaries")]
    if not found:
        return []
    method = found[0]["canaries"]["method"] or {}
    full = method.get("method") == "full"
    strata = sorted({int(k) for r in found for k in r["canaries"]["strata"]})
    table = []
    for r in found:
        cols = [r["arm"], r["size"] + (" (pretrained)" if r.get("pretrained") else "")]
        for s in strata:
            v = r["canaries"]["strata"].get(str(s))
            cols.append(
                "-"
                if not v
                else f"{v['mean']:.1f} [{v['low']:.1f}, {v['high']:.1f}]"
                + (f" (n {v['n']})" if full else f" ({v['saturated']}/{v['n']} sat., extrap. {v['extrapolated']:.1f})")
            )
        table.append(cols)
    space = method.get("space_bits")
    if full:
        how = (
            f"|R| = 2^{space:.1f} secrets, every one of them scored (the chain rule over partial secrets): the "
            "rank is exact, the largest exposure log2|R| (rank 1)."
        )
    else:
        how = (
            f"|R| = 2^{space:.1f} secrets, rank estimated from {method.get('n_candidates')} sampled candidates "
            f"(resolves ~{method.get('resolution_bits') or 0:.1f} bits; 'sat.' = canaries no sampled candidate "
            "beats, whose exposure is the paper's skew-normal extrapolation instead, at least what the sample "
            "resolves; 'extrap.' = that extrapolation's mean over all canaries: model-based, not a rank)."
        )
    return [
        "",
        "Canaries (Carlini et al. 2019): mean exposure log2|R| - log2 rank in bits per stratum (95 % "
        f"bootstrap interval over canaries); {how} A model that never saw a canary scores 1/ln 2 = 1.44 bits on "
        "average.",
        "",
        markdown_table(["arm", "size"] + [f"x{s}" for s in strata], table),
    ]


def render(results: dict) -> str:
    threshold = threshold_markdown(results)
    return markdown_section("Exposure threshold (E50) and canaries", threshold) if threshold else ""
