"""Eval's mask-consistent extraction attack per cell (and placement, prefix length) beside greedy decoding, when some
cell ran it (``decoding.adversary: mask_consistent``): exact match of each with the McNemar p against greedy, and
accuracy on the dropped suffix positions decoded and teacher-forced."""

from __future__ import annotations

from goldfish.eval.tables import markdown_section, boot, fmt, markdown_table, p_text, prefix_text

from ..summary import Study, cells_of, one_per_arm


def compute(study: Study) -> dict:
    return {}


def adversary_table(results: dict) -> str | None:
    """The table (None when no cell ran the attack)."""
    every = cells_of(results)
    cells = [c for c in every if (c.adversary or {}).get("rows")]
    if not cells:
        return None
    one = one_per_arm(every)
    rows = []
    for c in cells:
        mask = c.adversary.get("mask") or {}
        for r in c.adversary["rows"]:
            em, acc = r.get("exact_match") or {}, r.get("dropped_accuracy") or {}
            test = r.get("mcnemar_vs_greedy") or {}
            rows.append(
                [
                    c.label(results["axes"], one),
                    f"k={mask.get('k')} h={mask.get('h')} {mask.get('strategy')}",
                    f"{r.get('window')} {prefix_text(r.get('prefix_len'))}",
                    fmt(r.get("n_windows"), "int"),
                    fmt(r.get("n_dropped"), "int"),
                    boot(em.get("greedy")),
                    *(
                        f"{boot(em.get(v))} (p {p_text((test.get(v) or {}).get('p_value'))})"
                        for v in ("mc_oracle", "mc_switch")
                    ),
                    *(boot(acc.get(v)) for v in ("greedy", "mc_oracle", "mc_switch", "tf", "tf_oracle")),
                ]
            )
    return markdown_table(
        [
            "cell",
            "mask assumed",
            "window",
            "windows",
            "dropped positions",
            "exact match greedy",
            "mask-consistent, told (p vs greedy)",
            "mask-consistent, switch (p vs greedy)",
            "dropped acc. greedy",
            "told",
            "switch",
            "teacher-forced",
            "teacher-forced told",
        ],
        rows,
    )


def render(results: dict) -> str:
    table = adversary_table(results)
    if not table:
        return ""
    return markdown_section(
        "Mask-consistent extraction (the Goldfish hash as the attacker's side information)",
        table,
        "At a suffix position believed dropped, the continuation keeps only the candidates whose hash "
        "window (the h tokens ending at the candidate) the mask drops. Told: the attacker knows which "
        "positions are dropped (an upper bound); switch: it believes a position dropped where the model's "
        "top-1 probability is below the switch threshold. p: exact McNemar test against greedy on the same "
        "windows. Dropped acc.: accuracy on the dropped suffix positions (decoded continuations, then "
        "teacher-forced on the true prefix). 95 % intervals resample documents.",
    )
