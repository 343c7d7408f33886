"""Reports: files and tables on synthetic schema-following results, missing sections, word highlighting, plots."""

from __future__ import annotations


import pytest

from goldfish.eval.aggregate import summarize
from goldfish.eval.membership import membership_section
from goldfish.eval.plots import bar_chart, line_plot
from goldfish.eval.report import format_summary_table, write_report
from goldfish.eval.tables import highlight_differences, markdown_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
pytestmark = pytest.mark.render  # the plot tests: figures drawn for real (stubbed elsewhere, tests/conftest.py)


def _window(i: int, p: int, r: int, tm: float, split: str = "members") -> dict:
    truth = f"the quick brown fox number {i} jumps over the lazy dog"
    words = truth.split()
    n_wrong = round((1 - tm) * len(words))
    gen = " ".join(words[: len(words) - n_wrong] + ["X"] * n_wrong)
    return {
        "doc_id": f"d{i}",
        "title": f"Doc {i}",
        "repetitions": r,
        "split": split,
        "prefix_len": p,
        "suffix_len": 10,
        "window": "end",
        "start": 0,
        "exact_match": tm == 1.0,
        "token_match": tm,
        "longest_match_prefix": int(10 * tm),
        "rouge_l": tm,
        "rouge_l_words": tm,
        "lcs_len": int(10 * tm),
        "edit_distance": 1 - tm,
        "onepass_exact": tm == 1.0,
        "extraction_strength": tm,
        "suffix_logprob": -1.0,
        "p_suffix": 0.3,
        "np_extraction": 0.5,
        "generation": gen,
        "truth": truth,
        "generation_ids": [],
        "truth_ids": [],
        "sha256": "0" * 64,
    }


def synthetic_results(prefix_lens=(32, 64), reps=(1, 4, 16), membership=True) -> dict:
    windows = []
    i = 0
    for p in prefix_lens:
        for r in reps:
            for tm in (1.0, 0.5, 0.0 if r == 1 else 1.0):
                windows.append(_window(i, p, r, tm))
                i += 1
    windows.append(_window(i, prefix_lens[0], 0, 0.1, split="nonmembers"))
    results = {
        "schema": "goldfish-eval/1",
        "created": "2026-11-29T20:00:00Z",
        "git": "abc123",
        "model": {"path": "runs/x/model", "num_parameters": 1_500_000, "vocab_size": 512, "dtype": "float32"},
        "data": {"path": "prepared/x", "members": 9, "nonmembers": 4, "skipped_short": 1},
        "windows": windows,
        "summary": summarize(windows),
        "membership": None,
    }
    if membership:
        results["membership"] = membership_section(
            {"loss": [-1.0, -1.2, -0.5, -2.5], "min_k_20": [-3.0, -2.0, -2.5, -6.0]},
            {"loss": [-3.0, -2.0, -2.6, -2.2], "min_k_20": [-5.0, -6.0, -2.2, -5.5]},
            n_bootstrap=50,
        )
    return results


def test_highlight_marks_exactly_the_differing_words():
    gen, truth = highlight_differences("the cat sat on a mat today", "the dog sat on the mat")
    assert gen == "the **cat** sat on **a** mat **today**"
    assert truth == "the **dog** sat on **the** mat"
    assert highlight_differences("same words here", "same  words\nhere") == ("same words here", "same words here")
    gen, truth = highlight_differences("a b c d", "a x y d")  # a run of differences shares one span
    assert (gen, truth) == ("a **b c** d", "a **x y** d")
    gen, truth = highlight_differences("", "only truth")
    assert (gen, truth) == ("", "**only truth**")
    gen, _ = highlight_differences("x*y | z", "x*y | w")  # Markdown characters are escaped
    assert gen == "x\\*y \\| **z**"


def test_write_report_full(tmp_path):
    results = synthetic_results()
    paths = write_report(results, tmp_path)
    names = {p.name for p in paths}
    assert paths[0] == tmp_path / "report.md"
    assert names == {
        "report.md",
        "memorisation_vs_prefix_len.png",
        "memorisation_vs_repetitions.png",
        "roc.png",
        "token_match_hist.png",
    }
    for p in paths[1:]:
        assert p.read_bytes()[:8] == PNG_MAGIC
    md = (tmp_path / "report.md").read_text()
    for heading in (
        "# Memorisation evaluation",
        "## Headline",
        "## By prefix length",
        "## By repetition count",
        "## Membership inference",
        "## Examples",
        "### Best memorised",
        "### Worst memorised",
        "## Plots",
    ):
        assert f"\n{heading}\n" in f"\n{md}"
    # headline, each split apart (issue 58): 18 member windows, 10 exact (3 strata x 2 prefix lengths: r=1 has 1
    # exact, r=4 and r=16 have 2 each), and the one nonmember window -- never the pooled 10 of 19
    headline = md.split("## Headline")[1].split("\n## ")[0]
    assert "Members:" in headline and "| 18 | 55.6 % [" in headline
    assert "Nonmembers:" in headline and "| 1 | 0.0 % [" in headline and "| 19 |" not in headline
    assert "| loss | " in md and "| min_k_20 | " in md
    assert "![roc](roc.png)" in md
    assert "1.50 M parameters" in md
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary files left behind


def test_write_report_copes_with_missing_sections(tmp_path):
    results = synthetic_results(prefix_lens=(32,), reps=(1,), membership=False)
    results["data"]["nonmembers"] = 0
    paths = write_report(results, tmp_path)
    assert {p.name for p in paths} == {"report.md", "token_match_hist.png"}  # one stratum: no line plots, no ROC
    md = (tmp_path / "report.md").read_text()
    assert "Not run (no nonmember documents)" in md
    assert "LOSS-attack AUC" not in md
    # one prefix length and one placement: its table would repeat the headline's row, so there is none (issue 58)
    assert "## By prefix length" not in md and "## Headline" in md and "\n## Glossary\n" in md
    bare = {"windows": results["windows"]}  # no summary, model or data sections: summary recomputed
    write_report(bare, tmp_path / "bare")
    assert "## Headline" in (tmp_path / "bare" / "report.md").read_text()
    write_report({"windows": []}, tmp_path / "empty")
    assert "Extraction not run" in (tmp_path / "empty" / "report.md").read_text()
    # nonmembers given but membership left out of the tasks: the report says so, not "no nonmember documents"
    skipped = dict(synthetic_results(membership=False), config={"tasks": ["extraction"]})
    write_report(skipped, tmp_path / "skipped")
    assert "Not run (tasks excludes membership)" in (tmp_path / "skipped" / "report.md").read_text()


def test_summary_table_numbers(tmp_path):
    results = synthetic_results()
    table = format_summary_table(results)
    lines = table.splitlines()
    end = next(line for line in lines if line.startswith("window end"))  # one row per placement, never pooled
    # token match = 13.1 / 19; no word ROUGE-L (rouge-score) nor one-pass top-1 accuracy in these windows, token
    # ROUGE-L 0.689; log p(suffix) -1.0, (n,p) 0.5
    assert lines[0].split()[:6] == ["n", "exact", "%", "token", "ROUGE-L", "words"]
    assert end.split() == ["window", "end", "19", "52.6", "%", "0.689", "–", "0.689", "–", "-1.0", "0.500"]
    assert any(line.startswith("prefix 64") for line in lines)
    assert any(line.startswith("repetitions 0") for line in lines)
    loss = results["membership"]["attacks"]["loss"]
    assert f"MIA loss      AUC {loss['auc']:.3f} [" in table
    assert "MIA" not in format_summary_table(synthetic_results(membership=False))


def test_markdown_table_escapes_pipes():
    assert markdown_table(["a", "b"], [["x|y", 1]]) == "| a | b |\n|---|---|\n| x\\|y | 1 |"


def test_plot_primitives(tmp_path):
    p = bar_chart({"a": 0.2, "b": 0.5}, "t", "y", tmp_path / "bar.png", errors={"a": (0.1, 0.3)})
    assert p.read_bytes()[:8] == PNG_MAGIC
    p = line_plot(
        {"s": ([1, 10, 100], [0.1, 0.2, 0.3]), "t": ([0, 5], [1.0, 2.0])},
        "t",
        "x",
        "y",
        tmp_path / "line.png",
        logx=True,
        fit=True,
    )
    assert p.read_bytes()[:8] == PNG_MAGIC
    p = line_plot({"s": ([0, 16, 32], [0.1, 0.2, 0.3])}, "t", "x", "y", tmp_path / "lin.png", logx=False, fit=True)
    assert p.read_bytes()[:8] == PNG_MAGIC  # x = 0 on a linear axis: drawn, not fitted


def test_one_colour_per_arm_in_every_figure_and_a_vector_copy(tmp_path):
    from goldfish.eval.plots import ARM_COLORS, bar_chart, colors_for

    # an arm keeps its colour whatever else a figure shows and in whatever order
    one = colors_for(["control", "standard", "goldfish k=4"])
    two = colors_for(["goldfish k=4", "standard x4", "my-arm"])
    assert one["control"] == ARM_COLORS["control"] and one["standard"] == two["standard x4"] == ARM_COLORS["standard"]
    assert one["goldfish k=4"] == two["goldfish k=4"] == ARM_COLORS["goldfish"]
    assert colors_for(["my-arm"]) == {"my-arm": two["my-arm"]} and two["my-arm"] not in ARM_COLORS.values()
    many = colors_for([f"arm{i}" for i in range(7)])
    assert len(set(many.values())) == 7  # names that would collide get the next free colour
    p = bar_chart(
        {"standard": 1.0, "control": 0.5}, "AUC", "ROC-AUC", tmp_path / "auc.png", by_construction=["control"]
    )
    svg = p.with_suffix(".svg").read_text()
    assert p.read_bytes()[:8] == PNG_MAGIC and svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "by construction" in svg  # the control's 0.500 says it is not a measurement


@pytest.mark.parametrize("bad", [None, {}])
def test_report_without_windows_or_membership(tmp_path, bad):
    paths = write_report({"summary": summarize([]), "membership": bad}, tmp_path)
    assert [p.name for p in paths] == ["report.md"]


def test_every_curve_of_the_per_run_plots_has_its_interval():
    from goldfish.eval.report import strata_bands, strata_series

    # the one word-level ROUGE-L of the figures is the paper's (rouge-score); token-id ROUGE-L is not drawn
    strata = {
        "1": {
            "exact_match_rate": 0.0,
            "exact_match_ci_low": 0.0,
            "exact_match_ci_high": 0.2,
            "rouge_l_paper": 0.3,
            "rouge_l_paper_ci_low": 0.25,
            "rouge_l_paper_ci_high": 0.35,
            "rouge_l": 0.9,
        },
        "4": {
            "exact_match_rate": 0.5,
            "exact_match_ci_low": 0.3,
            "exact_match_ci_high": 0.7,
            "rouge_l_paper": 0.6,
            "rouge_l_paper_ci_low": 0.5,
            "rouge_l_paper_ci_high": 0.7,
            "rouge_l": 0.9,
        },
        "0": {"exact_match_rate": 0.0, "rouge_l_paper": 0.1},
        "unknown": {"exact_match_rate": 0.0},
    }  # no points
    series, bands = strata_series(strata), strata_bands(strata)
    paper = "ROUGE-L (rouge-score, the paper's)"
    assert set(series) == set(bands) == {"exact match", paper}
    assert series[paper] == ([1.0, 4.0], [0.3, 0.6])
    assert bands[paper] == ([0.25, 0.5], [0.35, 0.7])
    assert bands["exact match"] == ([0.0, 0.3], [0.2, 0.7])


def test_the_study_curves_pool_windows_with_intervals_over_documents():
    from goldfish.eval.stats import wilson_interval
    from goldfish.experiment.plots import _series

    # exact match of 4 documents at x = 1 (one verbatim) and of 2 at x = 4 (none: the bootstrap degenerates, so
    # Wilson's over the documents); ROUGE-L as a mean with its bootstrap interval
    points = [("a", 1, v, ("c", d)) for d, v in enumerate([1.0, 0.0, 0.0, 0.0])]
    points += [("a", 4, 0.0, ("c", d)) for d in range(2)]
    series, bands = _series(points, rate=True)
    assert series == {"a": ([1, 4], [0.25, 0.0])}
    assert bands["a"][0][1] == 0.0 and bands["a"][1][1] == wilson_interval(0, 2)[1]
    assert bands["a"][0][0] <= 0.25 <= bands["a"][1][0]
