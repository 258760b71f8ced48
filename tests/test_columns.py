"""The column catalog (`sweeper.results.columns`, issue 41 §1): every column a view emits is
in it, and the envelope's terminal table shows each envelope column one way or another (a
column, or the mark, merged column or stderr line the catalog names): none reaches csv and
vanishes from the terminal without a word."""

from __future__ import annotations

import pandas as pd
import pytest
from test_cli_reads import attacked, csv, run, storage  # noqa: F401 (fixtures)

from sweeper.api.envelope_view import COVERED
from sweeper.report.formats import COLUMN_LABELS, FRACTIONS, is_fraction
from sweeper.results import columns
from sweeper.results.columns import BY_NAME, CATALOG, ENVELOPE_PRIORITY, SUMMARY_COLUMNS, known
from sweeper.results.envelope import READ_COLUMNS


def test_each_column_is_named_once_and_says_how_the_terminal_shows_it():
    names = [c.name for c in CATALOG]
    assert len(names) == len(set(names))
    # a terminal column or a way without one, never both
    both = [c.name for c in CATALOG if c.priority is not None and c.instead]
    assert both == []
    priorities = [c.priority for c in CATALOG if c.priority is not None]
    assert len(priorities) == len(set(priorities))


def test_the_views_lists_are_the_catalogs():
    """What used to be four lists (labels, fractions, the terminal's headings and order, the
    envelope's model settings) is read from the one catalog."""
    assert COLUMN_LABELS["sigma"] == "σ" and COLUMN_LABELS["max_radius"] == "max r"
    assert {
        "certified_accuracy",
        "clean_acc",
        "acr",
        "abstain_rate",
        "empirical_accuracy",
        "max_radius",
        "ci_low",
        "ci_high",
        "final_accuracy",
        "final_best",
    } == FRACTIONS
    assert is_fraction("r=0.25_ci_low") and not is_fraction("sigma")
    assert SUMMARY_COLUMNS == [
        "method",
        "attack",
        "sigma",
        "epsilon",
        "steps",
        "m_train",
        "sigma_cert",
    ]
    assert ENVELOPE_PRIORITY[:9] == [
        "radius",
        "certified_accuracy",
        "trial_id",
        "ci",
        "empirical_accuracy",
        "final_accuracy",
        "final_best",
        "final_best_trial_id",
        "clean_acc",
    ]
    assert ENVELOPE_PRIORITY[-1] == "max_radius"
    assert columns.SCREEN_LABELS["trial_id"] == "winner" and columns.SCREEN_LABELS["m_train"] == "m"
    assert set(SUMMARY_COLUMNS) <= set(READ_COLUMNS)


@pytest.mark.parametrize("by", [None, "method"])
def test_every_envelope_column_is_in_the_catalog_and_shown_one_way(attacked, by):  # noqa: F811
    args = ["envelope", "--radii", "0,0.25,0.5", "--empirical", "--format", "csv"]
    emitted = list(csv(run(attacked, *args, *(["--by", by] if by else []))).columns)
    assert {"ci_low", "sigma_cert", "runner_up", "empirical_accuracy"} <= set(emitted)
    added = [COVERED, "attested"]  # under the envelope strategy; with a key
    unknown = [c for c in [*emitted, *added] if c != by and not known(c)]
    assert unknown == []
    silent = [
        c
        for c in [*emitted, *added]
        if c != by and BY_NAME[c].priority is None and not BY_NAME[c].instead
    ]
    assert silent == []


def test_the_terminal_shows_every_envelope_column_with_a_priority_when_wide(attacked):  # noqa: F811
    wide = run(attacked, "envelope", "--radii", "0,0.5", "--empirical", "--wide").stdout
    header = next(line for line in wide.splitlines() if "radius" in line)
    headings = [h.strip() for h in header.strip("┃ ").split("┃")]
    # in the table's order; every column with a priority and something in it, and no other
    assert headings == [
        "radius",
        "cert. acc",
        "95% CI",
        "winner",
        "clean acc",
        "ACR",
        "method",
        "attack",
        "σ",
        "ε",
        "T",
        "m",
        "models",
        "max r",
        "emp. acc",
    ]
    absent = {"λ", "η", "final", "final best", "final best model"}  # no MACER, no final step
    assert {columns.SCREEN_LABELS[c] for c in ENVELOPE_PRIORITY} - set(headings) == absent


def test_every_per_model_table_column_is_in_the_catalog(storage):  # noqa: F811
    table = csv(run(storage, "table", "--format", "csv"))
    unknown = [c for c in table.columns if not known(c)]
    assert unknown == []
    assert isinstance(table, pd.DataFrame) and "r=0.25_ci_low" in table.columns


def test_every_report_table_heading_is_a_catalog_label(storage):  # noqa: F811
    """The report's tables head their columns from the catalog (`report.build.HEADERS`): no
    heading is a raw column name the catalog does not know."""
    from sweeper import Sweep

    built = Sweep(storage=str(storage), experiment="exp").read().report([0.0, 0.5], ("svg",))
    labels = {c.label for c in CATALOG} | {"", "m_train"}  # sections, quantities; as papers
    headings = set()
    for f in built.files:
        if f.name.endswith(".md") and f.name != "index.md":
            header = next(line for line in f.data.decode().splitlines() if line.startswith("|"))
            headings |= {h.strip() for h in header.strip("|").split("|")}
    assert {"σ", "ACR", "trial_id", "models", "r=0.5", "ℓ∞ 8/255"} <= headings
    assert [h for h in headings if h not in labels and not h.startswith(("r=", "ℓ∞ "))] == []
