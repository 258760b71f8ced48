"""The column catalog: every column a view of certification results can emit (the envelope, the
per-model table, the report's tables and legends), once, with how people read it.

Each `Column` says its heading (`label`: tables, reports, figure legends; `screen`: the
terminal's when it differs there), whether it is a measured fraction (shown with `DIGITS`
decimals), whether it is a model's setting the envelope carries to its winner's row
(`setting`), and how the envelope's terminal table shows it: a column kept in `priority`
order when the table is too wide, or `instead`, the way it is shown without one (a mark, a
merged column, a line on stderr). `tests/test_columns.py` builds every view and checks that
each column it emits is here, and that the terminal shows each envelope column one way or the
other: no column reaches csv and vanishes from the terminal without a word.

Plain constants (no pandas): the command line's `--help` imports them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    label: str
    fraction: bool = False  # measured (not set): DIGITS decimals in every table and report
    screen: str | None = None  # the terminal's heading, when not `label`
    priority: float | None = None  # the envelope's terminal table: lower kept first
    instead: str = ""  # how the envelope's terminal table shows it without a column
    setting: bool = False  # a model's setting the envelope copies to its winner's row

    @property
    def heading(self) -> str:
        """The heading on the terminal."""
        return self.screen or self.label


_CI = "the 95% CI column (low–high)"
_RUNNER_UP = "≈ after a winner the test points do not tell from its runner-up"
# In the envelope's column order; the model settings (`setting`) in SUMMARY_COLUMNS's order.
CATALOG = (
    Column("radius", "ℓ2 radius", screen="radius", priority=0),
    Column("certified_accuracy", "cert. acc", fraction=True, priority=1),
    Column("ci_low", "95% CP low", fraction=True, instead=_CI),
    Column("ci_high", "95% CP high", fraction=True, instead=_CI),
    Column("ci", "95% CI", priority=3),  # the terminal's merge of ci_low and ci_high
    Column("trial_id", "trial_id", screen="winner", priority=2),
    Column("cert_id", "cert_id", instead="the settings line on stderr (certified with ...)"),
    Column("clean_acc", "clean acc", fraction=True, priority=5),
    Column("acr", "ACR", fraction=True, priority=8),
    Column("points", "points", instead="the coverage line and the 95% CI note on stderr"),
    Column("method", "method", priority=6, setting=True),
    Column("attack", "attack", priority=9, setting=True),
    Column("sigma", "σ", priority=7, setting=True),
    Column("epsilon", "ε", priority=10, setting=True),
    Column("steps", "T", priority=11, setting=True),
    Column("m_train", "m_train", screen="m", priority=12, setting=True),
    Column(
        "sigma_cert",
        "σ_cert",
        setting=True,
        instead="the settings line on stderr: its cert_id names σ_cert (sigma-train: σ)",
    ),
    Column("models", "models", priority=13),
    Column("max_radius", "max r", fraction=True, priority=16),
    Column("runner_up", "runner-up", instead=_RUNNER_UP),
    Column("paired_p", "p vs runner-up", instead=_RUNNER_UP),
    Column("distinguishable", "distinguishable", instead=_RUNNER_UP),
    Column("covered", "covered", instead="≥ before a number the guarantee does not cover"),
    Column("attested", "attested", instead="† after a number resting on unattested files"),
    Column("empirical_accuracy", "emp. acc", fraction=True, priority=4),
    Column("lam", "λ", priority=14),
    Column("eta", "η", priority=15),
    Column("abstain_rate", "abstain", fraction=True),
    Column("status", "status"),  # the per-model table's pruned models
    Column("exact_from", "exact_from", instead="≥ before the numbers below it"),
    Column("strategy", "strategy"),
    # the final step (issue 40): the winner and the best candidate on the report points (the
    # papers' numbers: kept right after the selection's own, when there is a final step)
    Column("final_accuracy", "final cert. acc", fraction=True, screen="final", priority=4.1),
    Column("final_best", "final best", fraction=True, priority=4.2),
    Column("final_best_trial_id", "final best model", priority=4.3),
    Column("final_points", "final points", instead="the settings line on stderr (its points)"),
    Column("final_cert_id", "final cert_id", instead="the settings line on stderr"),
)
BY_NAME = {c.name: c for c in CATALOG}
# Per-radius columns of the per-model and report tables (`r=0.25`, `r=0.25_ci_low`,
# `r=0.25_upper`, `linf=2/255`): measured fractions, each headed by its name.
PER_RADIUS = ("r=", "linf=")

FRACTIONS = frozenset(c.name for c in CATALOG if c.fraction)
SUMMARY_COLUMNS = [c.name for c in CATALOG if c.setting]
# How a results column is headed wherever people read it (tables, reports, figure legends).
COLUMN_LABELS = {c.name: c.label for c in CATALOG}
# The terminal's headings (the envelope's winner, m, the plain radius).
SCREEN_LABELS = {c.name: c.heading for c in CATALOG}
# The envelope's terminal columns, the first kept when the table is too wide.
ENVELOPE_PRIORITY = [
    c.name for c in sorted(CATALOG, key=lambda c: c.priority or 0) if c.priority is not None
]


def is_fraction(column: object) -> bool:
    return str(column) in FRACTIONS or str(column).startswith(PER_RADIUS)


def known(column: object) -> bool:
    """Whether `column` is in the catalog (or a per-radius column)."""
    return str(column) in BY_NAME or str(column).startswith(PER_RADIUS)
