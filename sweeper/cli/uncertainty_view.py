"""How the terminal and markdown show the envelope's uncertainty over the test points
(`sweeper.results.envelope_uncertainty`): the winner's interval in one column, ≈ after a
winner its runner-up is not told apart from, and one line on stderr saying what both mean."""

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
