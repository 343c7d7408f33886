"""The report's header: the experiment's name and question, how many cells finished, and where the numbers were
computed (device, resolved precisions, versions, code). Rendered even before any cell has finished."""

from __future__ import annotations

from ..summary import CellSummary, Study, cells_of


def compute(study: Study) -> dict:
    return {}


def provenance_line(cells: list[CellSummary]) -> str:
    """Where the numbers were computed: device, resolved precisions, versions, code commit (from the cells)."""

    def values(key: str) -> str:
        found = sorted({str(getattr(c, key)) for c in cells if getattr(c, key)})
        return " / ".join(found) or "-"

    device = next((c.device for c in cells if c.device), {}) or {}
    where = device.get("name", "unknown device")
    if device.get("type") == "cpu":
        where += f", {device.get('threads')} threads, ATen {device.get('aten_capability')}"
    bf16 = f"native bf16: {'yes' if device.get('native_bf16') else 'no'} ({device.get('bf16_reason', '?')})"
    versions = next((c.versions for c in cells if c.versions), {}) or {}
    shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    # the code version names the commit of a git checkout, else a hash of the sources (goldfish.provenance)
    code = next((c.code or c.git[:12] for c in cells if c.code or c.git), None)
    return (
        f"Computed on {where}; {bf16}. Training precision {values('precision')}, evaluation precision "
        f"{values('eval_precision')} (precision=auto resolved on this device). {shown}"
        + (f"; code {code}" if code else "")
        + "."
    )


def render(results: dict) -> str:
    cells = cells_of(results)
    lines = [f"# Experiment `{results['experiment']}`", ""]
    if results.get("description"):
        lines += [results["description"], ""]
    lines += [
        f"{results['n_done']} of {results['n_cells']} cells finished"
        + (f"; missing: {', '.join(results['missing'])}" if results["missing"] else "")
        + ".",
        "",
    ]
    if cells:
        lines += [provenance_line(cells), ""]
    return "\n".join(lines)
