"""The per-cell analyses' registry (``goldfish.experiment.analyses.ANALYSES``) is all the runner, the cell summary,
``summary.json`` and the report need to know of an analysis: its phase runs after evaluation (one that reads
its control's files, the attacks, after the others), its part's fields are the cell summary's, its
``summary_keys`` are summary.json's, its sections sit where it says."""

from __future__ import annotations

import dataclasses

import pytest

from goldfish.experiment.aggregate import SUMMARY_KEYS
from goldfish.experiment.analyses import ANALYSES, Section
from goldfish.experiment.analyses.attacks import ATTACKS
from goldfish.experiment.phases import PHASES
from goldfish.experiment.plan import Pipeline
from goldfish.experiment.sections import SECTIONS, AnalysisSection, placed
from goldfish.experiment.sections import figures, repetition1
from goldfish.experiment.summary import CellCore, CellSummary, compose


def test_each_analysis_is_a_phase_between_eval_and_the_card_those_reading_their_control_last():
    names = [p.name for p in PHASES]
    assert len(set(names)) == len(names)
    own = [a.name for a in ANALYSES if not a.reads_control]
    assert names[names.index("eval") + 1 : names.index("card")] == own + [a.name for a in ANALYSES if a.reads_control]


def test_the_attacks_are_a_registered_analysis_and_the_pipeline_holds_only_the_tools():
    """attacks.json's analysis is registered like the others (its phase, which waits for the control, its part of
    the cell summary, its summary.json keys); ``Pipeline`` names only prepare, train, evaluate, the model handle and
    which analyses run."""
    attacks = next(a for a in ANALYSES if a.name == "attacks")
    assert attacks is ATTACKS and attacks.reads_control
    reads = [a.reads_control for a in ANALYSES]
    assert reads == sorted(reads)  # those that read other cells' files (attacks, values) run after the others
    phase = next(p for p in PHASES if p.name == "attacks")
    assert phase.blocked is not None  # waits for the control of its grid point
    assert {"tf_accuracy", "leakage", "mia_by_exposure", "mia_auc_reference_ci"} <= set(attacks.summary_keys)
    assert {f.name for f in dataclasses.fields(ATTACKS.part)} <= {f.name for f in dataclasses.fields(CellSummary)}
    assert len(dataclasses.fields(Pipeline)) <= 5
    assert [f.name for f in dataclasses.fields(Pipeline)] == ["prepare", "train", "evaluate", "open_model", "analyses"]


def test_summary_json_keys_are_the_summary_fields_metadata():
    """summary.json's keys of a cell come from the typed parts' field metadata (``summary_key(place)``), the
    analyses' ``summary_keys`` after them: no list of them is written by hand."""
    placed = [f for f in dataclasses.fields(CellSummary) if "summary" in f.metadata]
    assert SUMMARY_KEYS[: len(placed)] == tuple(f.name for f in sorted(placed, key=lambda f: f.metadata["summary"]))
    assert SUMMARY_KEYS[0] == "cell" and len(set(SUMMARY_KEYS)) == len(SUMMARY_KEYS)
    assert set(SUMMARY_KEYS) <= {f.name for f in dataclasses.fields(CellSummary)}
    assert [f.name for f in dataclasses.fields(Pipeline)] == ["prepare", "train", "evaluate", "open_model", "analyses"]


def test_each_analysis_part_is_in_the_cell_summary_and_its_keys_in_summary_json():
    fields = {f.name for f in dataclasses.fields(CellSummary)}
    core = {f.name for f in dataclasses.fields(CellCore)}
    for a in ANALYSES:
        part = {f.name for f in dataclasses.fields(a.part)}
        assert part <= fields and not part & core
        assert set(a.summary_keys) <= part and set(a.summary_keys) <= set(SUMMARY_KEYS)
        assert vars(a.part()) == {k: None for k in part}  # a cell without the analysis's file: every field null


def test_each_analysis_section_sits_after_the_one_it_names():
    shown, last = [], None
    for s in SECTIONS:
        if isinstance(s, AnalysisSection):
            assert s.section.after == last
            shown.append(s.section)
        else:
            last = s.__name__.rsplit(".", 1)[-1]
    assert sorted(map(id, shown)) == sorted(id(s) for a in ANALYSES for s in a.sections)


def test_compose_refuses_a_field_the_summary_has():
    @dataclasses.dataclass
    class Clash:
        heldout_loss: float | None = None

    with pytest.raises(TypeError, match="heldout_loss"):
        compose(CellCore, [Clash])


def test_placed_puts_sections_after_the_named_one_and_refuses_an_unknown_name():
    added = Section(after="repetition1", render=lambda results, cells: "")
    out = placed((repetition1, figures), [added])
    assert out[0] is repetition1 and out[1] == AnalysisSection(added) and out[2] is figures
    with pytest.raises(ValueError, match="nowhere"):
        placed((repetition1,), [Section(after="nowhere", render=added.render)])


def test_the_csv_cell_columns_come_from_the_fields_metadata():
    """results.csv's cell columns are the summary fields declared with a csv place, in that order: no hand list."""
    import dataclasses

    from goldfish.experiment.aggregate import ROW_CELL_KEYS, rows_of
    from goldfish.experiment.summary import CellSummary

    marked = sorted((f.metadata["csv"], f.name) for f in dataclasses.fields(CellSummary) if "csv" in f.metadata)
    assert ROW_CELL_KEYS == tuple(name for _, name in marked) and ROW_CELL_KEYS[0] == "params"
    cell = {"cell": "c", "arm": "a", "seed": 1, "params": 7, "strata": [{"prefix_len": 8, "n_windows": 2}]}
    (row,) = rows_of([cell], ["seed"])
    assert list(row)[:4] == ["cell", "arm", "seed", "params"] and row["params"] == 7 and row["n_windows"] == 2
