"""The README's quick-start numbers are the committed results of `make demo` (experiments/results/default/), so a
number the docs quote can never drift from the run that made it: each "ours" cell of the table, the paired test and
the leakage audit quoted under it, formatted from `summary.json` the way the README writes them. And every
measured-looking number of README.md, docs/results.md and experiments/README.md declares its source by a
`<!-- numbers: ... -->` marker (grammar: experiments/results/README.md); where the source is a committed folder,
each number is found in that folder's files."""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results" / "default"


@pytest.fixture(scope="module")
def summary() -> dict:
    return json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def quick_start() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quick start"):text.index("## Goldfish Loss in your code")]
    return "\n".join(" ".join(line.split()) for line in section.splitlines())  # one space between words


def _pct(x: float, digits: int = 0) -> str:
    return f"{100 * x:.{digits}f} %"


def _signed(x: float, digits: int = 1) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def _row(quick_start: str, label: str) -> list[str]:
    line = next(line for line in quick_start.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


@pytest.mark.parametrize("arm, label", [("standard", "standard"), ("goldfish", "Goldfish k=4, h=13"),
                                        ("control", "control (untouched SmolLM2)")])
def test_every_table_cell_is_the_committed_run(summary, quick_start, arm, label):
    s = summary[arm]
    exact, rouge, loss, accuracy, auc = _row(quick_start, label)
    k = round(s["exact_match_rate"] * s["n_windows"])
    assert exact.startswith(f"{_pct(s['exact_match_rate'])} ({k}/{s['n_windows']})")
    assert rouge.startswith(f"{s['rouge_l_paper']:.3f} /")
    assert loss == f"{s['heldout_loss']:.3f}"
    assert accuracy == f"{_pct(s['tf_kept_accuracy'], 1)} / {_pct(s['tf_dropped_accuracy'], 1)}"
    assert auc.startswith(f"{s['mia_auc']:.3f}")


def test_the_quoted_tests_are_the_committed_run(summary, quick_start):
    quick_start = " ".join(quick_start.split())  # the prose wraps anywhere
    pair = next(p for p in summary["paired"] if {p["a"], p["b"]} == {"standard", "goldfish"})
    p = pair["exact_match"]["p_value"]
    mantissa, exponent = f"{p:.1e}".split("e")
    assert f"p = {mantissa}e−{int(exponent[1:])}" in quick_start
    audit = summary["goldfish"]["leakage"]
    did = audit["did"]["dropped"]["accuracy"]
    assert (f"{_signed(100 * did['did'])} points [{_signed(100 * did['ci_low'])}, {_signed(100 * did['ci_high'])}]"
            in quick_start)
    assert f"it would see {100 * audit['mde']['accuracy']:.1f}" in quick_start
    assert f"its placebo {_signed(100 * audit['placebo']['accuracy']['did'])}" in quick_start


def test_the_committed_run_says_where_it_came_from(summary):
    """Precision and device are in the committed summary, and the README quotes the same resolved precisions."""
    s = summary["standard"]
    assert s["precision"] in ("bf16", "fp32") and s["eval_precision"] == "fp32"
    assert re.search(r"`precision: auto` → " + s["precision"], (REPO / "README.md").read_text(encoding="utf-8"))


# --- Every number the docs quote declares its source (issue 38, item 7) -------------------------------------------
#
# The grammar (experiments/results/README.md): a line `<!-- numbers: SOURCE[; SOURCE ...] -->` starts a span that runs
# to the next marker or the next Markdown heading (any level); a marker inside a table row (`| ... <!-- ... --> |`)
# applies to that row alone. SOURCE is one of
#   experiments/results/<config>   every measured-looking number must be found in that folder's files
#   paper                          quoted from Hans et al. 2024
#   pending <config>               from an earlier run of experiments/<config>.yaml whose files are not committed; its
#                                  rerun is pending (the config must have no committed folder)
#   unrecorded <path>              measured by <path> (a script or config) where no results file is kept: wall times,
#                                  memory, disk, an earlier run kept for comparison, a dry run's estimate
# A span whose sources include a committed folder and something else passes a number found in the folder and leaves
# the others unchecked; a span of committed folders alone checks every number.

DOCS = ("README.md", "docs/results.md", "experiments/README.md")
MARKER = re.compile(r"<!--\s*numbers:\s*(.*?)\s*-->")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CHECKED = re.compile(r"^experiments/results/([\w.-]+)/?$")

# Numbers that are not results, recognised by pattern and cut out before the measured-looking ones are read.
NOT_RESULTS = [re.compile(p) for p in (
    r"\b\d{4}-\d{2}-\d{2}\b",                                           # dates
    r"\b\d+\.\d+\.\d+\S*",                                              # versions: torch 2.13.0
    r"[Pp]ython\s*[≥>=]+\s*\d+\.\d+",                                    # Python >= 3.10
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b",             # commit ids
    r"\b(?:k|h|m|seeds?|lr|epochs|prefix_len|repetitions|size|margin)\s*=\s*[\d.]+(?:e[−+-]?\d+)?",  # k=4, h=13
    r"[x×]\s?\d+\b",                                                    # repetition strata: x16, ×50, 100 × 100
    r"\b\d+(?:\.\d+)?\s?[MBk]\b",                                       # sizes of models and corpora: 0.9 M, 20 B
    r"\b[A-Za-z][\w.]*-\d+(?:\.\d+)*\w*",                               # names: Llama-2-7B, SmolLM2-135M, Apache-2.0
    r"\b\d+(?:\.\d+)? %(?= (?:and \d+(?:\.\d+)? % )?(?:CI|bootstrap|confidence|profile|t interval|intervals?|FPR|"
    r"power)\b)",                                                       # levels: 95 % CI, TPR at 1 % and 0.1 % FPR
    r"\bat 1 % FPR", r"\bmore than \d+ %",                              # the TPR's operating point, a threshold
    r"\b2\.80 (?:SE|standard errors)", r"\b0\.5 = chance|\bnear 0\.5\b",  # the code's constants
)]
NUMBER = re.compile(r"(?P<sign>(?<![\w.)§])[+−-]|−)?(?<![\w.§])(?P<num>\d+(?:,\d{3})*(?:\.\d+)?(?:e[−+-]?\d+)?)"
                    r"(?P<tail>\s?%|/\d+|\s?(?:min|s|h|GB|MB|GiB|MiB)\b)?")


@dataclass(frozen=True)
class Number:
    text: str       # as the doc writes it (a fraction with its denominator)
    value: float
    digits: int     # decimals shown; of the mantissa in scientific notation
    sci: bool
    fraction: bool
    percent: bool = False

    def rounds_from(self, leaf: float, as_shown: bool = False) -> bool:
        """`leaf` shown at this number's digits is this number: a JSON leaf x 100 for a percentage, as is or x 100
        (points) for other numbers; a number of report.md (`as_shown`) as is."""
        if self.sci:
            return leaf != 0 and f"{leaf:.{self.digits}e}" == f"{self.value:.{self.digits}e}"
        half = 0.5 * 10 ** -self.digits * (1 + 1e-9) + 1e-12
        scales = (1,) if as_shown else (100,) if self.percent else (1, 100)
        return any(abs(scale * leaf - self.value) <= half for scale in scales)


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
        out.append(Number(sign + num + (tail if tail.startswith("/") else ""),
                          float(body) * (-1 if sign in ("-", "−") else 1),
                          len(mantissa.split(".")[1]) if "." in mantissa else 0, "e" in body, tail.startswith("/"),
                          tail == "%"))
    return out


def _norm(token: str) -> str:
    return token.replace("−", "-").lstrip("+")


LONGEST_QUOTED = 8  # a list of more numbers than this (a ROC curve, per-step losses, per-document scores) is no reading


def _leaves(obj, out: list) -> list:
    if isinstance(obj, dict):
        for v in obj.values():
            _leaves(v, out)
    elif isinstance(obj, list):
        if sum(isinstance(v, (int, float)) for v in obj) <= LONGEST_QUOTED:  # curves, per-document scores: not quoted
            for v in obj:
                _leaves(v, out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and math.isfinite(obj):
        out.append(float(obj))
    return out


def _stored(folder: Path, name: str) -> Path | None:
    """A committed file as written (``results.json``) or gzip-compressed (``results.json.gz``, for a study whose
    JSON is over the repo's 5 MB limit); None where neither is there."""
    return next((p for p in (folder / name, folder / f"{name}.gz") if p.is_file()), None)


def _read_json(path: Path):
    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())


class Committed:
    """A committed results folder: the numeric leaves of its JSON files and the number tokens of its report."""

    def __init__(self, folder: Path):
        self.folder = folder
        values: list = []
        for name in ("results.json", "summary.json"):
            if path := _stored(folder, name):
                _leaves(_read_json(path), values)
        self.leaves = sorted(set(values))
        report = (folder / "report.md").read_text(encoding="utf-8")
        report = report.split("\n## Side-by-side generations")[0]  # the articles' own text holds no result
        self.tokens = {_norm(t) for t in re.findall(r"[+−-]?\d+(?:\.\d+)?(?:e[−+-]?\d+)?(?:/\d+)?", report)}
        self.shown = sorted({float(t) for t in self.tokens if "/" not in t})

    def has(self, n: Number) -> bool:
        """A token of report.md as written or rounded to the digits shown, or a JSON leaf that rounds to it."""
        return _norm(n.text) in self.tokens or (not n.fraction and (any(n.rounds_from(v, True) for v in self.shown)
                                                                    or any(n.rounds_from(v) for v in self.leaves)))


def spans(text: str) -> list[tuple[str, str | None, list[int], str]]:
    """(heading, marker, line numbers, prose) for every stretch of a doc: a heading's body, cut at each marker line; a
    marker inside a table row makes that row a span of its own. Fenced and indented code are not prose."""
    heading, marker, start, lines, numbers, fenced, out = "(before the first heading)", None, 1, [], [], False, []

    def flush():
        if marker is not None or any(line.strip() for line in lines):
            out.append((heading, marker, numbers or [start], "\n".join(lines)))

    for i, line in enumerate(text.splitlines(), 1):
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


def check_doc(name: str, text: str, repo: Path = REPO) -> list[str]:
    """Every problem with the sources of the numbers in one doc, one line each, naming file, line, heading and fix."""
    problems, cache = [], {}
    for heading, marker, linenos, prose in spans(text):
        where = f"{name}:{linenos[0]} (section '{heading}')"
        numbers = measured_numbers(prose)

        def line_of(n: Number) -> int:
            return next((k for k, line in zip(linenos, prose.splitlines()) if n.text in line), linenos[0])

        if marker is None:
            if numbers:
                problems.append(f"{name}:{line_of(numbers[0])} (section '{heading}'): measured-looking numbers {[n.text for n in numbers][:6]} without a source; "
                                f"put a line `<!-- numbers: experiments/results/<config> | paper | pending <config> | "
                                f"unrecorded <path> -->` above them (experiments/results/README.md)")
            continue
        folders, unchecked = [], False
        for source in (s.strip() for s in marker.split(";")):
            kind, _, arg = source.partition(" ")
            checked = CHECKED.match(source)
            if checked:
                folder = repo / "experiments" / "results" / checked.group(1)
                missing = [f for f in ("results.json", "report.md") if not _stored(folder, f)]
                if missing:
                    problems.append(f"{where}: marker source {source} has no {' or '.join(missing)}")
                    continue
                folders.append(cache.setdefault(folder, Committed(folder)))
            elif source == "paper":
                unchecked = True
            elif kind == "pending" and arg:
                unchecked = True
                if not (repo / "experiments" / f"{arg}.yaml").is_file():
                    problems.append(f"{where}: 'pending {arg}' names no config experiments/{arg}.yaml")
                if (repo / "experiments" / "results" / arg).exists():
                    problems.append(f"{where}: 'pending {arg}' but experiments/results/{arg}/ is committed: mark the "
                                    f"section `<!-- numbers: experiments/results/{arg} -->` and make its numbers "
                                    f"those of the committed run")
            elif kind == "unrecorded" and arg:
                unchecked = True
                if not (repo / arg).exists():
                    problems.append(f"{where}: 'unrecorded {arg}': no such script or config")
            else:
                problems.append(f"{where}: unknown source {source!r} (experiments/results/<config>, paper, "
                                f"pending <config>, unrecorded <path>)")
        if folders and not unchecked:
            for n in numbers:
                if not any(f.has(n) for f in folders):
                    problems.append(f"{name}:{line_of(n)} (section '{heading}'): {n.text} is not in "
                                    f"{', '.join(str(f.folder.relative_to(repo)) for f in folders)} (no token of "
                                    f"report.md, no number of results.json / summary.json that rounds to it)")
    return problems


@pytest.mark.parametrize("doc", DOCS)
def test_every_number_in_the_docs_has_its_source(doc):
    problems = check_doc(doc, (REPO / doc).read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_a_wrong_number_is_caught():
    good = "## Demo\n<!-- numbers: experiments/results/default -->\nstandard 100 % (20/20), held-out loss 3.694.\n"
    assert check_doc("doc.md", good) == []
    bad = check_doc("doc.md", good.replace("3.694", "3.695").replace("20/20", "19/20"))
    assert len(bad) == 2 and "19/20 is not in experiments/results/default" in bad[0] and "3.695 is not in" in bad[1]
    assert "doc.md:3 (section 'Demo')" in bad[1]
    moved = check_doc("doc.md", good + "\nheld-out loss 3.611\n")
    assert len(moved) == 1 and moved[0].startswith("doc.md:5 (section 'Demo'): 3.611 is not in")
    row = "| arm | loss |\n|---|---|\n| standard | 3.694 <!-- numbers: experiments/results/default --> |\n"
    assert check_doc("doc.md", "## T\n" + row) == []
    assert "3.794 is not in" in check_doc("doc.md", "## T\n" + row.replace("3.694", "3.794"))[0]


def test_an_unmarked_number_is_caught():
    problems = check_doc("doc.md", "# Top\n## Results\nGoldfish lowers it by −1.1 points (p 0.64).\n")
    assert len(problems) == 1 and "doc.md:3 (section 'Results')" in problems[0] and "without a source" in problems[0]
    assert check_doc("doc.md", "## Design\n20 articles, k=4, h=13, 2026-12-04, torch 2.13.0, 95 % CI.\n") == []
    ends = check_doc("doc.md", "## A\n<!-- numbers: paper -->\n0.51\n### B\nROUGE-L 0.26\n")  # a span ends at a heading
    assert len(ends) == 1 and "doc.md:5 (section 'B')" in ends[0]
    mixed = "## A\n<!-- numbers: experiments/results/default; paper -->\n3.694 beside the paper's 0.96, and 7.77\n"
    assert check_doc("doc.md", mixed) == []  # another source named: what the folder lacks is left unchecked
    assert "7.77 is not in" in check_doc("doc.md", mixed.replace("; paper", ""))[0]


def test_a_stale_pending_marker_and_a_bad_source_are_caught():
    stale = check_doc("doc.md", "## Demo\n<!-- numbers: pending default -->\nexact match 100 %.\n")
    assert len(stale) == 1 and "experiments/results/default/ is committed" in stale[0]
    assert check_doc("doc.md", "## X\n<!-- numbers: pending near_duplicates -->\n0.449 ± 0.028\n") == []
    assert "names no config" in check_doc("doc.md", "## X\n<!-- numbers: pending nosuch -->\n1.5 %\n")[0]
    assert "has no results.json" in check_doc("doc.md", "## X\n<!-- numbers: experiments/results/nosuch -->\n")[0]
    assert "unknown source" in check_doc("doc.md", "## X\n<!-- numbers: trust me -->\n1.5 %\n")[0]


def test_a_compressed_results_file_is_read_like_the_plain_one(tmp_path):
    # a study over the repo's 5 MB limit is committed as results.json.gz: its numbers must count as the folder's
    (tmp_path / "report.md").write_text("# r\n", encoding="utf-8")
    (tmp_path / "results.json.gz").write_bytes(gzip.compress(json.dumps({"e50": 26.7, "n": [1.5]}).encode()))
    assert {26.7, 1.5} <= set(Committed(tmp_path).leaves)
    assert _stored(tmp_path, "results.json") == tmp_path / "results.json.gz"
    assert _stored(tmp_path, "summary.json") is None
