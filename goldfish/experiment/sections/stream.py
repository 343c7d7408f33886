"""What each trained cell read (``exposure.json``, counted from the rows training consumed): tokens, the targets'
(and canaries') share of them, the copies read per label, and the nonmember count."""

from __future__ import annotations

from goldfish.eval.tables import markdown_section, pct

from ..summary import Study, cells_of


def compute(study: Study) -> dict:
    return {}


def render(results: dict) -> str:
    cells = cells_of(results)
    lines = []
    for c in cells:
        s = c.stream or {}
        if not s.get("tokens"):
            continue
        reads = "; ".join(f"{kind} " + ", ".join(f"x{r}: {lo}" + ("" if lo == hi else f"-{hi}")
                                                  for r, (lo, hi) in sorted(v.items(), key=lambda kv: int(kv[0])))
                          for kind, v in (c.reads or {}).items())
        canary = f", canaries {s['canaries']:,} ({pct(s['canary_share'])} %)" if s.get("canaries") else ""
        lines.append(f"- `{c.cell}`: {s['tokens']:,} tokens read; targets {s['members']:,} "
                     f"({pct(s['member_share'])} %){canary}; copies read per label: {reads or '-'}.")
    if not lines:
        return ""
    nonmembers = {c.nonmembers for c in cells if c.nonmembers}
    return markdown_section("Training stream (counted from the rows training read)", "\n".join(lines),
                            "Nonmembers (held-out documents of the same pool): "
                            f"{', '.join(str(n) for n in sorted(nonmembers))}.")
