"""The output formats and defaults the command line names in its options' help: plain
constants, so that listing the commands (`sweeper --help`) imports neither pandas nor
matplotlib."""

FORMATS = ("table", "csv", "json", "markdown")
DIGITS = 3  # decimals of every measured fraction (accuracy, ACR, abstention) shown to people
FIGURE_FORMATS = ("png", "pdf", "svg")
LINF_RADII_255 = (1.0, 2.0, 4.0, 8.0)  # ℓ∞ radii of the ℓ∞ table, in units of 1/255
