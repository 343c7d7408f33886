"""The exposure threshold of a size sweep: E50 per size and arm (a logistic fit of exact match on log2 exposures
read, :func:`goldfish.experiment.scaling.group_e50`), the log-log fit of E50 over parameters, and the canaries'
Secret-Sharer exposure per stratum (computed into the ``scaling`` block by :mod:`goldfish.experiment.sections.size`).
"""

from __future__ import annotations

from goldfish.eval.tables import markdown_section, markdown_table

from ..summary import Study


def compute(study: Study) -> dict:
    return {}


def _e50_text(e: dict | None) -> str:
    """``12.3 [8.1, 20.5]``, with censored values as ``> 128`` / ``< 2``."""
    if not e:
        return "-"
    top = max(s["exposures"] for s in e["strata"])
    bottom = min(s["exposures"] for s in e["strata"])

    def one(value: float | None, status: str) -> str:
        if status == "above":
            return f"> {top:g}"
        if status == "below":
            return f"< {bottom:g}"
        return "-" if value is None else f"{value:.3g}"

    return f"{one(e['e50'], e['status'])} [{one(e['low'], e['low_status'])}, {one(e['high'], e['high_status'])}]"


def threshold_markdown(results: dict) -> str | None:
    """The report's section on the exposure threshold E50 (per size and arm, the log-log fit over sizes) and the
    canaries' Secret-Sharer exposure; None when no row has either."""
    rows = (results.get("scaling") or {}).get("rows") or []
    if not any(r.get("e50") or r.get("canaries") for r in rows):
        return None
    ordered = sorted(rows, key=lambda r: (r["arm"] != "control", r["arm"], r.get("pretrained", False),
                                          r["params"] or 0))
    lines = ["E50: the exposures at which half of the targets are extracted (exact match), from a logistic fit of "
             "exact match on log2 exposures read (Firth-penalised; 95 % percentile bootstrap over targets within "
             "strata); censored as > max / < min where the fitted rate stays below / above one half over the "
             "tested exposures.", ""]
    table = [[r["arm"], r["size"] + (" (pretrained)" if r.get("pretrained") else ""),
              f"{(r['params'] or 0) / 1e6:.2f} M", _e50_text(r.get("e50")),
              "-" if not r.get("e50") else f"{r['e50']['slope']:.2f} +- {r['e50']['slope_se']:.2f}",
              "-" if not r.get("e50") else str(r["e50"]["n_targets"])]
             for r in ordered if r["arm"] != "control"]
    lines += [markdown_table(["arm", "size", "params", "E50 [95 % CI]", "logistic slope per doubling",
                              "targets"], table), ""]
    fits = (results.get("scaling") or {}).get("e50_fits") or []
    fit_rows = [[f["arm"], str(f["interior"]), f"{f['slope']:+.2f} +- {f['slope_se']:.2f} (10^{f['intercept']:.2f} "
                 "at 1 parameter)" if "slope" in f else f["why_not"]] for f in fits]
    lines += ["Log-log fit of E50 vs parameters (from-scratch sizes with E50 inside the tested exposures; a "
              "pretrained model is shown, never fitted); slope +- standard error (< 0: larger models need fewer "
              "exposures):", "", markdown_table(["arm", "sizes fitted", "d log10 E50 / d log10 params"], fit_rows)]
    lines += canary_markdown(ordered)
    return "\n".join(lines)


def canary_markdown(rows: list[dict]) -> list[str]:
    """The canary table: mean Secret-Sharer exposure per stratum and row, with its interval."""
    found = [r for r in rows if r.get("canaries")]
    if not found:
        return []
    method = found[0]["canaries"]["method"] or {}
    strata = sorted({int(k) for r in found for k in r["canaries"]["strata"]})
    table = []
    for r in found:
        cols = [r["arm"], r["size"] + (" (pretrained)" if r.get("pretrained") else "")]
        for s in strata:
            v = r["canaries"]["strata"].get(str(s))
            cols.append("-" if not v else f"{v['mean']:.1f} [{v['low']:.1f}, {v['high']:.1f}] "
                        f"({v['saturated']}/{v['n']} sat., extrap. {v['extrapolated']:.1f})")
        table.append(cols)
    space = method.get("space_bits")
    return ["", f"Canaries (Carlini et al. 2019): mean exposure log2|R| - log2 rank in bits per stratum (95 % "
            f"bootstrap interval over canaries); |R| = 2^{space:.1f} secrets, rank estimated from "
            f"{method.get('n_candidates')} candidates ({method.get('method')}: resolves ~"
            f"{method.get('resolution_bits') or 0:.1f} bits; 'sat.' = canaries no sampled candidate beats, whose "
            "exposure is the paper's skew-normal extrapolation instead, at least what the sample resolves; "
            "'extrap.' = that extrapolation's mean over all canaries). A model that never saw a canary scores "
            "1/ln 2 = 1.44 bits on average.", "",
            markdown_table(["arm", "size"] + [f"x{s}" for s in strata], table)]


def render(results: dict) -> str:
    threshold = threshold_markdown(results)
    return markdown_section("Exposure threshold (E50) and canaries", threshold) if threshold else ""
