"""Per cell and labelled repetition stratum: exact match, both ROUGE-Ls and every membership attack's AUC (eval's
attacks on the stratum's members against all nonmembers, and the reference attack calibrated by the control), each
with its 95 % interval."""

from __future__ import annotations

from goldfish.eval.metrics import METRICS, ROUGE
from goldfish.eval.tables import interval, markdown_section, markdown_table, pct

from ..summary import Study, cells_of


def compute(study: Study) -> dict:
    return {}


def attacks_only(results: dict) -> str:
    """Every membership attack's AUC per cell (its one stratum), without the extraction the headline shows."""
    cells, axes = cells_of(results), results.get("axes") or []
    attacks = list(dict.fromkeys(a for c in cells for a in c.stratum_membership or {}))
    rows = [
        [
            c.arm + "".join(f" {a}={c.values.get(a)}" for a in axes),
            *[interval(next(iter(((c.stratum_membership or {}).get(a) or {}).values()), None)) for a in attacks],
        ]
        for c in cells
    ]
    return markdown_section(
        "Every membership attack",
        markdown_table(["cell", *[f"AUC {a}" for a in attacks]], rows),
        "AUC [95 % bootstrap CI], members against all nonmembers (0.5 = chance).",
    )


def render(results: dict) -> str:
    cells, axes = cells_of(results), results.get("axes") or []
    if not any(c.stratum_membership for c in cells):
        return ""
    if all(len(c.stratum_extraction or {}) <= 1 for c in cells):
        return attacks_only(results)  # one stratum per cell: its extraction is the headline's row
    attacks = list(dict.fromkeys(a for c in cells for a in c.stratum_membership or {}))
    rows = []
    for c in cells:
        label = c.arm + "".join(f" {a}={c.values.get(a)}" for a in axes)
        extraction, mia = c.stratum_extraction or {}, c.stratum_membership or {}
        ref, ref_ci = c.mia_by_exposure or {}, c.mia_by_exposure_ci or {}
        for r, e in sorted(extraction.items(), key=lambda kv: int(kv[0])):
            low, high = (ref_ci.get(r) or {}).get("reference") or (None, None)
            reference = {"auc": (ref.get(r) or {}).get("reference"), "low": low, "high": high}
            rows.append(
                [
                    label,
                    f"x{r}",
                    f"{pct(e['rate'])} % [{pct(e['low'])}, {pct(e['high'])}] ({e['exact']}/{e['n']})",
                    *[interval(e.get(name), "mean") for name in ROUGE],
                    *[interval((mia.get(a) or {}).get(r)) for a in attacks],
                    interval(reference),
                ]
            )
    return markdown_section(
        "Per repetition stratum: extraction and every membership attack",
        markdown_table(
            [
                "cell",
                "stratum",
                "exact match % [95 % CI]",
                *[f"{METRICS[name].short} [95 % CI]" for name in ROUGE],
                *[f"AUC {a}" for a in attacks],
                "AUC reference (control)",
            ],
            rows,
        ),
        "Members labelled x r against all nonmembers; AUC with a 95 % bootstrap CI (0.5 = chance). Exact "
        "match: Wilson interval; ROUGE-L: normal interval over windows. The reference attack is calibrated by "
        "the control's model (attacks.json).",
    )
