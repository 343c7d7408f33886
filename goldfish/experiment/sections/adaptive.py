"""Greedy exact match beside eval's adaptive extraction attacks (beam search, temperature sampling) per cell, when
some cell ran them (``decoding.beam > 1``, ``decoding.samples > 0``)."""

from __future__ import annotations

from goldfish.eval.tables import markdown_section, fmt, markdown_table, with_ci

from ..summary import CellSummary, Study, cells_of, one_per_arm


def compute(study: Study) -> dict:
    return {}


def _rate(c: CellSummary, key: str, low: str = "", high: str = "") -> str:
    """A rate in percent with its 95 % interval (``<key>_ci_low``/``_ci_high`` unless named)."""
    return with_ci(getattr(c, key), getattr(c, low or f"{key}_ci_low"), getattr(c, high or f"{key}_ci_high"), "pct")


def adaptive_table(results: dict) -> str | None:
    """The table (None when no cell ran an adaptive attack)."""
    cells = cells_of(results)
    if not any(c.beam_exact_match_rate is not None or c.sample_rate is not None for c in cells):
        return None
    one = one_per_arm(cells)
    rows = [
        [
            c.label(results["axes"], one),
            fmt(c.n_windows, "int"),
            _rate(c, "exact_match_rate", "exact_match_ci_low", "exact_match_ci_high"),
            _rate(c, "beam_exact_match_rate") + (f" (beam {c.beam_width})" if c.beam_width else ""),
            _rate(c, "sample_rate"),
            _rate(c, "sample_any_rate")
            + (f" ({c.n_samples} samples, T={c.sample_temperature})" if c.n_samples else ""),
        ]
        for c in cells
    ]
    return markdown_table(
        ["cell", "windows", "greedy exact match", "beam exact match", "sample rate", "any sample exact"], rows
    )


def render(results: dict) -> str:
    table = adaptive_table(results)
    if not table:
        return ""
    return markdown_section(
        "Adaptive extraction attacks (beam search, sampling)",
        table,
        "Exact match of the suffix by greedy decoding, by beam search, and by temperature samples (sample "
        "rate: mean fraction of a window's samples that reproduce it; any sample exact: windows with at "
        "least one). 95 % intervals: Wilson for rates over windows, normal for the mean sample rate.",
    )
