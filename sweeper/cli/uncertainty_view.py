"""How the terminal and markdown show the uncertainty over the test points
(`sweeper.results.envelope_uncertainty`): in the envelope the winner's interval in one column,
≈ after a winner its runner-up is not told apart from; in the per-model table each radius's
interval in a column after it (`r=0.25 95% CI`), on the terminal without the radii past the
last one a model certifies a point at (`radii_that_matter`); and one line on stderr saying
what they mean."""

from __future__ import annotations

from sweeper.cli import display

CI_HEADER = "95% CI"


def uncertainty_texts(table, text):
    """`text` with the winner's interval as one `ci` column (`low–high`, after the accuracy)
    and ≈ after a winner its runner-up is not told apart from."""
    if "ci_low" not in table:
        return text
    ci = [
        "-" if lo in ("-", "") else f"{lo}–{hi}"
        for lo, hi in zip(text["ci_low"], text["ci_high"], strict=True)
    ]
    text = text.drop(columns=["ci_low", "ci_high", "paired_p", "distinguishable"])
    text.insert(text.columns.get_loc("certified_accuracy") + 1, "ci", ci)
    won = (table["certified_accuracy"] > 0).to_numpy()
    close = won & (table["distinguishable"] == False).to_numpy()  # noqa: E712 (None: none)
    text.loc[close, "trial_id"] = [f"{w} ≈" for w in text.loc[close, "trial_id"]]
    return text


def uncertainty_note(table) -> None:
    if "ci_low" not in table:
        return
    points = table["points"].dropna()
    size = f"{int(points.min())}" if len(points) and points.min() == points.max() else "its"
    display.echo(
        f"95% CI: Clopper–Pearson interval of the winner's certified accuracy over {size} test "
        "points; ≈: the test points do not tell the winner from the runner-up (McNemar's exact "
        "test on the points both certified, p ≥ 0.05; csv/json: paired_p)",
        err=True,
    )


def interval_header(column: str) -> str:
    """`r=0.25` -> `r=0.25 95% CI`: the heading of a radius's interval in the per-model table."""
    return f"{column} {CI_HEADER}"


def model_interval_texts(text):
    """The per-model table's cells (`text`) with each radius's `_ci_low` and `_ci_high`
    cells as one `r=0.25 95% CI` column (`low–high`; n/a beyond reach, - where nothing was
    measured), in place of the two."""
    from sweeper.report.render import BEYOND, CI_HIGH, CI_LOW

    for low in [c for c in text.columns if str(c).endswith(CI_LOW)]:
        radius = str(low).removesuffix(CI_LOW)
        high = f"{radius}{CI_HIGH}"
        cells = [
            lo if lo == BEYOND else "-" if lo in ("", "-") else f"{lo}–{hi}"
            for lo, hi in zip(text[low], text[high], strict=True)
        ]
        text.insert(text.columns.get_loc(low), interval_header(radius), cells)
        text = text.drop(columns=[low, high])
    return text


def model_interval_note(rows) -> None:
    if not any(str(c).endswith("_ci_low") for c in rows.columns):
        return
    points = rows["points"].dropna()
    size = f"{int(points.min())}" if len(points) and points.min() == points.max() else "its"
    display.echo(
        f"{CI_HEADER}: Clopper–Pearson interval of each model's certified accuracy at that "
        f"radius over {size} test points (csv/json: r=..._ci_low, r=..._ci_high)",
        err=True,
    )


def radii_that_matter(rows, trim: bool = True):
    """(the per-model rows without the radii, and their intervals, past the last radius at
    which some model certifies a point (or a pruned one is bounded above 0), those radii);
    as they are unless `trim`."""
    import pandas as pd

    if not trim:
        return rows, []
    radii = [str(c) for c in rows.columns if str(c).startswith("r=") and "_ci_" not in str(c)]
    some = [c for c in radii if (pd.to_numeric(rows[c], errors="coerce") > 0).any()]
    gone = radii[radii.index(some[-1]) + 1 :] if some else radii[1:]
    return rows.drop(columns=[c for c in rows.columns if str(c).split("_ci_")[0] in gone]), gone
