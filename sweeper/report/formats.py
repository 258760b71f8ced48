"""The output formats and defaults the command line names in its options' help: plain
constants, so that listing the commands (`sweeper --help`) imports neither pandas nor
matplotlib."""

FORMATS = ("table", "csv", "json", "markdown")
DIGITS = 3  # decimals of every measured fraction (accuracy, ACR, abstention) shown to people
FIGURE_FORMATS = ("png", "pdf", "svg")
LINF_RADII_255 = (1.0, 2.0, 4.0, 8.0)  # ℓ∞ radii of the ℓ∞ table, in units of 1/255
# Measured (not set) quantities, shown with DIGITS decimals in every table and report; so are
# the per-radius columns (`r=0.25`, `linf=2/255`).
FRACTIONS = frozenset(
    {
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
    }
)


def is_fraction(column: object) -> bool:
    return str(column) in FRACTIONS or str(column).startswith(("r=", "linf="))


# How a results column is headed wherever people read it (tables, reports, figure legends, the
# terminal); a view may override a few for its context (the envelope's trial_id is its winner).
COLUMN_LABELS = {
    "sigma": "σ",
    "epsilon": "ε",
    "steps": "T",
    "m_train": "m_train",
    "acr": "ACR",
    "clean_acc": "clean acc",
    "abstain_rate": "abstain",
    "certified_accuracy": "cert. acc",
    "empirical_accuracy": "emp. acc",
    "radius": "ℓ2 radius",
    "lam": "λ",
    "eta": "η",
    "sigma_cert": "σ_cert",
    "max_radius": "max r",
    "models": "models",
    "ci_low": "95% CP low",
    "ci_high": "95% CP high",
    "runner_up": "runner-up",
    "paired_p": "p vs runner-up",
    "final_accuracy": "final cert. acc",
    "final_points": "final points",
    "final_cert_id": "final cert_id",
    "final_best": "final best",
    "final_best_trial_id": "final best model",
}
