"""Every number the docs quote from a committed study is rendered from it or formatted from it, never matched against
"some value in the folder" (issue 53):

* `<!-- readings: experiments/results/<config>[ | question; ...] -->` ... `<!-- /readings -->` blocks are the study's
  readings as `python -m goldfish.experiment.rerender --docs` fills them from its results.json: a block that differs
  fails;
* the README's quick-start numbers (marker `quick-start experiments/results/default`) are formatted from
  `summary.json` the way the README writes them, the paper's beside them from :data:`PAPER`;
* every other measured-looking number of README.md, docs/results.md and experiments/README.md declares that it has
  no committed source (`paper`, `pending <config>`, `unrecorded <path>`, `config <path>`: grammar in
  experiments/results/README.md); a number typed by hand under a committed folder's marker fails.

A mutation test changes each checked number of the docs in turn (its last digit) and requires the check to fail."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from goldfish.experiment.rerender import render_blocks

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results" / "default"


# The paper's numbers the quick-start table sets beside ours (Hans et al. 2024, Fig. 1: Llama-2-7B, 100 articles x
# 100 epochs): exact match and ROUGE-L of standard / Goldfish k=4 / the untouched model
PAPER = {"standard": ("85 %", "0.96"), "goldfish": ("0 %", "0.51"), "control": ("0 %", "0.26")}
QUICK_START_ROWS = (
    ("standard", "standard"),
    ("goldfish", "Goldfish k=4, h=13"),
    ("control", "control (untouched SmolLM2)"),
)


def _pct(x: float, digits: int = 0) -> str:
    return f"{100 * x:.{digits}f} %"


def _signed(x: float, digits: int = 1) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def quick_start_of(readme: str) -> str:
    section = readme[readme.index("## Quick start") : readme.index("## Goldfish Loss in your code")]
    return "\n".join(" ".join(line.split()) for line in section.splitlines())  # one space between words


def quick_start_problems(readme: str, summary: dict) -> list[str]:
    """Every number of the README's quick-start table and of the tests quoted under it, formatted from the demo's
    committed summary.json (ours) and :data:`PAPER`: one line per cell or phrase that differs."""
    quick, problems = quick_start_of(readme), []
    for arm, label in QUICK_START_ROWS:
        s, paper = summary[arm], PAPER[arm]
        line = next((x for x in quick.splitlines() if x.startswith(f"| {label} |")), None)
        if line is None:
            problems.append(f"README quick start: no row '{label}'")
            continue
        cells = [c.strip() for c in line.strip("|").split("|")][1:]
        k = round(s["exact_match_rate"] * s["n_windows"])
        auc = f"{s['mia_auc']:.3f}"
        want = [
            f"{_pct(s['exact_match_rate'])} ({k}/{s['n_windows']}) / {paper[0]}",
            f"{s['rouge_l_paper']:.3f} / {paper[1]}",
            f"{s['heldout_loss']:.3f}",
            f"{_pct(s['tf_kept_accuracy'], 1)} / {_pct(s['tf_dropped_accuracy'], 1)}",
        ]
        for got, expected in zip(cells, want):
            if got != expected:
                problems.append(f"README quick start, row '{label}': '{got}' where summary.json gives '{expected}'")
        p = s.get("mia_auc_p") or {}
        exact = (
            f"{auc} (p = 1/C({p.get('n_members', 0) + p.get('n_nonmembers', 0)}, {p.get('n_members')}))"
            if p.get("method") == "perfect"
            else None
        )
        if len(cells) < 5 or not cells[4].startswith(auc) or (exact and cells[4] != exact):
            problems.append(
                f"README quick start, row '{label}': MIA AUC '{cells[4] if len(cells) > 4 else ''}' "
                f"where summary.json gives '{exact or auc}'"
            )
    prose = " ".join(quick.split())  # the prose wraps anywhere
    pair = next(p for p in summary["paired"] if {p["a"], p["b"]} == {"standard", "goldfish"})
    mantissa, exponent = f"{pair['exact_match']['p_value']:.1e}".split("e")
    audit = summary["goldfish"]["leakage"]
    did = audit["did"]["dropped"]["accuracy"]
    for phrase in (
        f"p = {mantissa}e−{int(exponent[1:])}",
        f"{_signed(100 * did['did'])} points [{_signed(100 * did['ci_low'])}, {_signed(100 * did['ci_high'])}]",
        f"it would see {100 * audit['mde']['accuracy']:.1f}",
        f"its placebo {_signed(100 * audit['placebo']['accuracy']['did'])}",
    ):
        if phrase not in prose:
            problems.append(f"README quick start: '{phrase}' (formatted from summary.json) is not in the text")
    return problems


def test_every_quick_start_number_is_the_committed_run():
    summary = json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))
    problems = quick_start_problems((REPO / "README.md").read_text(encoding="utf-8"), summary)
    assert not problems, "\n".join(problems)


def test_the_committed_run_says_where_it_came_from():
    """Precision and device are in the committed summary, and the README quotes the same resolved precisions."""
    s = json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))["standard"]
    assert s["precision"] in ("bf16", "fp32") and s["eval_precision"] == "fp32"
    assert re.search(r"`precision: auto` → " + s["precision"], (REPO / "README.md").read_text(encoding="utf-8"))


DOCS = ("README.md", "docs/results.md", "experiments/README.md")
MARKER = re.compile(r"<!--\s*numbers:\s*(.*?)\s*-->")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CHECKED = re.compile(r"^experiments/results/([\w.-]+)/?$")
BLOCK = re.compile(r"<!-- readings: .*? -->\n.*?<!-- /readings -->", re.S)

# Numbers that are not results, recognised by pattern and cut out before the measured-looking ones are read.
NOT_RESULTS = [
    re.compile(p)
    for p in (
        r"\b\d{4}-\d{2}-\d{2}\b",  # dates
        r"\b\d+\.\d+\.\d+\S*",  # versions: torch 2.13.0
        r"[Pp]ython\s*[≥>=]+\s*\d+\.\d+",  # Python >= 3.10
        r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b",  # commit ids
        r"\b(?:k|h|m|seeds?|lr|epochs|prefix_len|repetitions|size|margin)\s*=\s*[\d.]+(?:e[−+-]?\d+)?",  # k=4, h=13
        r"[x×]\s?\d+\b",  # repetition strata: x16, ×50, 100 × 100
        r"\b\d+(?:\.\d+)?\s?[MBk]\b",  # sizes of models and corpora: 0.9 M, 20 B
        r"\b[A-Za-z][\w.]*-\d+(?:\.\d+)*\w*",  # names: Llama-2-7B, SmolLM2-135M, Apache-2.0
        r"\b\d+(?:\.\d+)? %(?= (?:and \d+(?:\.\d+)? % )?(?:CI|bootstrap|confidence|profile|t interval|intervals?|FPR|"
        r"power)\b)",  # levels: 95 % CI, TPR at 1 % and 0.1 % FPR
        r"\bat 1 % FPR",
        r"\bmore than \d+ %",  # the TPR's operating point, a threshold
        r"\b2\.80 (?:SE|standard errors)",
        r"\b0\.5 = chance|\bnear 0\.5\b",  # the code's constants
    )
]
NUMBER = re.compile(
    r"(?P<sign>(?<![\w.)§])[+−-]|−)?(?<![\w.§])(?P<num>\d+(?:,\d{3})*(?:\.\d+)?(?:e[−+-]?\d+)?)"
    r"(?P<tail>\s?%|/\d+|\s?(?:min|s|h|GB|MB|GiB|MiB)\b)?"
)


@dataclass(frozen=True)
class Number:
    text: str  # as the doc writes it (a fraction with its denominator)
    value: float
    digits: int  # decimals shown; of the mantissa in scientific notation
    sci: bool
    fraction: bool
    percent: bool = False


def measured_numbers(text: str) -> list[Number]:
    """The measured-looking numbers of some prose: decimals, percentages, signed numbers (Unicode minus or +),
    scientific notation, counts written as fractions (20/20), durations and sizes (545 s, 4.4 GB). Plain integers
    are the design's (20 articles, 2 seeds) and not read; code spans and link targets are not prose."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    for pattern in NOT_RESULTS:
        text = pattern.sub("§", text)
    out = []
    for m in NUMBER.finditer(text):
        sign, num, tail = m.group("sign") or "", m.group("num"), (m.group("tail") or "").strip()
        if not (sign or "." in num or "e" in num or tail):
            continue
        body = num.replace(",", "").replace("−", "-")
        mantissa = body.split("e")[0]
        out.append(
            Number(
                sign + num + (tail if tail.startswith("/") else ""),
                float(body) * (-1 if sign in ("-", "−") else 1),
                len(mantissa.split(".")[1]) if "." in mantissa else 0,
                "e" in body,
                tail.startswith("/"),
                tail == "%",
            )
        )
    return out


def _norm(token: str) -> str:
    return token.replace("−", "-").lstrip("+")


def spans(text: str) -> list[tuple[str, str | None, list[int], str]]:
    """(heading, marker, line numbers, prose) for every stretch of a doc: a heading's body, cut at each marker line; a
    marker inside a table row makes that row a span of its own. Fenced and indented code and readings blocks (checked
    whole, :func:`block_problems`) are not prose."""
    heading, marker, start, lines, numbers, fenced, out = "(before the first heading)", None, 1, [], [], False, []
    in_block = False

    def flush():
        if marker is not None or any(line.strip() for line in lines):
            out.append((heading, marker, numbers or [start], "\n".join(lines)))

    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("<!-- readings:"):
            in_block = True
        if in_block:
            in_block = not line.startswith("<!-- /readings -->")
            continue
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        h, m = HEADING.match(line), MARKER.search(line)
        if h:
            flush()
            heading, marker, start, lines, numbers = h.group(2), None, i, [], []
        elif m and line.lstrip().startswith("|"):
            out.append((heading, m.group(1), [i], MARKER.sub(" ", line)))
        elif m:
            flush()
            marker, start, lines, numbers = m.group(1), i, [], []
        else:
            lines.append(line)
            numbers.append(i)
    flush()
    return out


def block_problems(name: str, text: str, repo: Path = REPO) -> list[str]:
    """Every readings block that is not what its study's results.json gives."""
    try:
        want = render_blocks(text, repo)
    except (OSError, ValueError, KeyError) as e:
        return [f"{name}: a readings block names no committed study ({e})"]
    if want == text:
        return []
    bad = [b for b, w in zip(BLOCK.findall(text), BLOCK.findall(want)) if b != w]
    first = bad[0].splitlines()[0] if bad else "?"
    return [
        f"{name}: {len(bad) or 1} readings block(s) differ from the committed results (first: {first}): run "
        f"`make docs` and commit, never edit a block by hand"
    ]


def check_doc(name: str, text: str, repo: Path = REPO) -> list[str]:
    """Every problem with the sources of the numbers in one doc, one line each, naming file, line, heading and fix."""
    problems = block_problems(name, text, repo)
    for heading, marker, linenos, prose in spans(text):
        where = f"{name}:{linenos[0]} (section '{heading}')"
        numbers = measured_numbers(prose)

        def line_of(n: Number) -> int:
            return next((k for k, line in zip(linenos, prose.splitlines()) if n.text in line), linenos[0])

        if marker is None:
            if numbers:
                problems.append(
                    f"{name}:{line_of(numbers[0])} (section '{heading}'): measured-looking numbers "
                    f"{[n.text for n in numbers][:6]} without a source; quote a committed study through "
                    f"a `<!-- readings: experiments/results/<config> -->` block, or mark them `<!-- "
                    f"numbers: paper | pending <config> | unrecorded <path> | config <path> -->` "
                    f"(experiments/results/README.md)"
                )
            continue
        for source in (s.strip() for s in marker.split(";")):
            kind, _, arg = source.partition(" ")
            if CHECKED.match(source):
                if numbers:
                    problems.append(
                        f"{name}:{line_of(numbers[0])} (section '{heading}'): {numbers[0].text} typed by "
                        f"hand under {source}: quote the study through a readings block (`make docs`), "
                        f"or link its report"
                    )
            elif kind == "quick-start" and CHECKED.match(arg) and name == "README.md":
                pass  # formatted from summary.json: quick_start_problems
            elif source == "paper":
                pass
            elif kind == "pending" and arg:
                if not (repo / "experiments" / f"{arg}.yaml").is_file():
                    problems.append(f"{where}: 'pending {arg}' names no config experiments/{arg}.yaml")
                if (repo / "experiments" / "results" / arg).exists():
                    problems.append(
                        f"{where}: 'pending {arg}' but experiments/results/{arg}/ is committed: quote "
                        f"it through a readings block"
                    )
            elif kind in ("unrecorded", "config") and arg:
                if not (repo / arg).exists():
                    problems.append(f"{where}: '{kind} {arg}': no such file")
                elif kind == "config":
                    body = (repo / arg).read_text(encoding="utf-8")
                    problems += [
                        f"{name}:{line_of(n)} (section '{heading}'): {n.text} is not a value of {arg}"
                        for n in numbers
                        if _norm(n.text).rstrip(" %") not in body
                    ]
            else:
                problems.append(
                    f"{where}: unknown source {source!r} (paper, pending <config>, unrecorded <path>, "
                    f"config <path>, quick-start experiments/results/default)"
                )
    return problems


@pytest.mark.parametrize("doc", DOCS)
def test_every_number_in_the_docs_has_its_source(doc):
    problems = check_doc(doc, (REPO / doc).read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def checked_numbers(text: str) -> list[tuple[int, int]]:
    """(start, end) of every number the checks hold to a committed file: those in readings blocks and in the README's
    quick-start spans."""
    out = []
    for m in BLOCK.finditer(text):
        body_start = text.index("\n", m.start()) + 1
        body_end = text.rindex("<!-- /readings -->", m.start(), m.end())
        out += [(body_start + n.start(), body_start + n.end()) for n in re.finditer(r"\d", text[body_start:body_end])]
    return out


def _mutate(text: str, at: int) -> str:
    return text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :]


@pytest.mark.parametrize("doc", DOCS)
def test_changing_any_quoted_number_fails_the_check(doc):
    """Issue 53's mutation test: every digit of every readings block, changed alone, is caught."""
    text = (REPO / doc).read_text(encoding="utf-8")
    digits = checked_numbers(text)
    if not digits:
        pytest.skip(f"{doc} quotes no committed study through a block")
    cache: dict = {}
    missed = []
    for start, _ in digits:
        if _blocks_equal(_mutate(text, start), cache):
            missed.append(text[max(0, start - 30) : start + 10])
    assert not missed, f"{len(missed)} of {len(digits)} changed digits pass: {missed[:3]}"


def _blocks_equal(text: str, cache: dict) -> bool:
    """Whether every readings block of ``text`` is what its study renders (the renders cached per block header)."""
    for m in BLOCK.finditer(text):
        header = m.group(0).split("\n", 1)[0]
        if header not in cache:
            cache[header] = render_blocks(header + "\n<!-- /readings -->", REPO)
        if m.group(0) != cache[header]:
            return False
    return True


def test_changing_any_quick_start_number_fails_the_check():
    """The same mutation test for the README's quick-start numbers (ours formatted from summary.json, the paper's
    from PAPER): each digit of the table and of the tests quoted under it, changed alone, is caught."""
    summary = json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- numbers: quick-start experiments/results/default -->")
    end = readme.index("<!--", start + 10)
    quoted = re.compile(
        r"^\|(?! arm ).*$|p = [\d.]+e−\d+|[+−]\d+\.\d+ points \[[^\]]*\]|would see \d+\.\d+|"
        r"placebo [+−]\d+\.\d+",
        re.M,
    )
    digits = [
        start + q.start() + d.start()
        for q in quoted.finditer(readme[start:end])
        for d in re.finditer(r"\d", q.group(0))
    ]
    assert len(digits) > 40
    missed = [readme[i - 25 : i + 5] for i in digits if not quick_start_problems(_mutate(readme, i), summary)]
    assert not missed, f"{len(missed)} of {len(digits)} changed digits pass: {missed[:5]}"


def test_a_hand_typed_number_under_a_committed_study_is_caught():
    ok = "## Demo\n<!-- numbers: unrecorded experiments/default.yaml -->\nwall 545 s.\n"
    assert check_doc("doc.md", ok) == []
    typed = check_doc("doc.md", "## Demo\n<!-- numbers: experiments/results/default -->\nheld-out loss 3.694.\n")
    assert len(typed) == 1 and "3.694 typed by hand under experiments/results/default" in typed[0]
    assert "doc.md:3 (section 'Demo')" in typed[0]


def test_a_readings_block_is_the_studys_and_an_edit_is_caught():
    block = "## R\n<!-- readings: experiments/results/extreme | utility -->\n<!-- /readings -->\n"
    filled = render_blocks(block, REPO)
    assert "no cost detected" in filled and check_doc("doc.md", filled) == []
    assert "differ from the committed results" in check_doc("doc.md", filled.replace("no cost", "a cost"))[0]
    assert "differ" in check_doc("doc.md", filled.replace("+0.015", "+0.016"))[0]
    assert "names no committed study" in check_doc("doc.md", block.replace("extreme", "nosuch"))[0]


def test_an_unmarked_number_is_caught():
    problems = check_doc("doc.md", "# Top\n## Results\nGoldfish lowers it by −1.1 points (p 0.64).\n")
    assert len(problems) == 1 and "doc.md:3 (section 'Results')" in problems[0] and "without a source" in problems[0]
    assert check_doc("doc.md", "## Design\n20 articles, k=4, h=13, 2026-12-04, torch 2.13.0, 95 % CI.\n") == []
    ends = check_doc("doc.md", "## A\n<!-- numbers: paper -->\n0.51\n### B\nROUGE-L 0.26\n")  # a span ends at a heading
    assert len(ends) == 1 and "doc.md:5 (section 'B')" in ends[0]
    config = "## C\n<!-- numbers: config experiments/standard_setting.yaml -->\nmargin ±0.05 and ±0.10\n"
    assert check_doc("doc.md", config) == []
    assert "0.07 is not a value of" in check_doc("doc.md", config.replace("0.05", "0.07"))[0]


def test_a_stale_pending_marker_and_a_bad_source_are_caught():
    stale = check_doc("doc.md", "## Demo\n<!-- numbers: pending default -->\nexact match 100 %.\n")
    assert len(stale) == 1 and "experiments/results/default/ is committed" in stale[0]
    assert check_doc("doc.md", "## X\n<!-- numbers: pending near_duplicates -->\n0.449 ± 0.028\n") == []
    assert "names no config" in check_doc("doc.md", "## X\n<!-- numbers: pending nosuch -->\n1.5 %\n")[0]
    assert "unknown source" in check_doc("doc.md", "## X\n<!-- numbers: trust me -->\n1.5 %\n")[0]
    quick = "## X\n<!-- numbers: quick-start experiments/results/default -->\n1.5 %\n"
    assert "quick-start" not in " ".join(check_doc("README.md", quick))


CONFIGS = sorted(str(p.relative_to(REPO)) for p in (REPO / "experiments").rglob("*.yaml"))


def header_of(path: Path) -> str:
    """A config's leading comment block as Markdown prose (its `# <!-- numbers: ... -->` line a marker)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return "## header\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize("config", CONFIGS)
def test_every_number_in_a_config_header_has_its_source(config):
    """Config headers hold costs, settings and earlier runs, never a committed study's numbers retyped: each
    measured-looking number sits under a marker (a committed study is read in docs/results.md, not here)."""
    text = header_of(REPO / config)
    problems = check_doc(config, text)
    assert not problems, "\n".join(problems)
    assert not re.search(r"<!--\s*numbers:[^>]*experiments/results/", text), (
        f"{config}: a header quotes a committed study; point to docs/results.md instead"
    )


def test_a_config_header_number_without_a_marker_is_caught(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("# The design: k=4, 20 articles.\n# Measured: 292 s, exact match 95 %.\nname: c\n", encoding="utf-8")
    assert "without a source" in check_doc("c.yaml", header_of(cfg))[0]
    cfg.write_text(
        "# <!-- numbers: unrecorded experiments/default.yaml -->\n# Measured: 292 s.\nname: c\n", encoding="utf-8"
    )
    assert check_doc("c.yaml", header_of(cfg)) == []
