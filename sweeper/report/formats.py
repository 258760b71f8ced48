"""The output formats and defaults the command line names in its options' help: plain
constants, so that listing the commands (`sweeper --help`) imports neither pandas nor
matplotlib. Headings and which columns are measured fractions (shown with DIGITS decimals in
every table and report) come from the column catalog, `results.columns`."""

from sweeper.results.columns import (
    COLUMN_LABELS,
    ENVELOPE_PRIORITY,
    FRACTIONS,
    SCREEN_LABELS,
    is_fraction,
)

__all__ = ["COLUMN_LABELS", "DIGITS", "FIGURE_FORMATS", "FORMATS", "FRACTIONS", "LINF_RADII_255"]
__all__ += ["ENVELOPE_PRIORITY", "SCREEN_LABELS", "is_fraction"]

FORMATS = ("table", "csv", "json", "markdown")
DIGITS = 3  # decimals of every measured fraction (accuracy, ACR, abstention) shown to people
FIGURE_FORMATS = ("png", "pdf", "svg")
LINF_RADII_255 = (1.0, 2.0, 4.0, 8.0)  # ℓ∞ radii of the ℓ∞ table, in units of 1/255
