"""Rendering results: text formats for tables and matplotlib figures like the paper's Figure 1."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa

from sweeper.report.figures import (
    Cover,
    Curve,
    FigureData,
    radius_grid,
    render_figure,
    value_label,
)
from sweeper.report.formats import DIGITS, FORMATS, is_fraction
from sweeper.report.tables import distinguishing_columns
from sweeper.results.certify_rows import SCHEMA
from sweeper.results.envelope import certified_accuracy, envelope_curve, max_radii, model_table
from trainables.kernel import fileio
from trainables.kernel.stage_settings import strategy_of

# Measured per winner: blank ("-" to people) where the envelope is 0 and nobody wins.
NOT_WINNER = {
    "radius",
    "certified_accuracy",
    "models",
    "empirical_accuracy",
    "max_radius",
    "covered",
}
COUNTS = {"points", "models", "final_points"}  # integers that are no schema column


def cell(value, column=None, digits: int = DIGITS) -> str:
    """A value as people read it: measured fractions with `digits` decimals, other numbers
    exactly as set (0.25, 2), nothing for a missing value."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (float, np.floating)):
        return f"{value:.{digits}f}" if is_fraction(column) else f"{value:g}"
    return str(value)


def with_integers(frame: pd.DataFrame) -> pd.DataFrame:
    """Integer settings and counts as integers (`steps` 2, not 2.0; null stays null): a
    column null for some rows is float64 in pandas; here it is Int64 again."""
    ints = {f.name for f in SCHEMA if pa.types.is_integer(f.type)} | COUNTS
    out = frame.copy()
    for c in out.columns:
        values = out[c]
        if str(c) in ints and values.dtype.kind in "fO" and _integral(values):
            out[c] = values.astype("Int64")
    return out


def _integral(values: pd.Series) -> bool:
    known = pd.to_numeric(values.dropna(), errors="coerce")
    return bool(known.notna().all() and (known == known.round()).all())


def no_winner(table: pd.DataFrame) -> pd.DataFrame:
    """The envelope with its winner's columns null where the certified accuracy is 0: where
    no model certifies anything, nobody wins (every format says so, the terminal with -)."""
    nobody = (table["certified_accuracy"] <= 0).to_numpy()
    if not nobody.any():
        return table
    winner = [c for c in table.columns if c not in no_winner_columns(table)]
    out = table.astype({c: object for c in winner if table[c].dtype.kind != "f"})
    for c in winner:  # a float column keeps its dtype (NaN), any other holds None
        out.loc[nobody, c] = np.nan if out[c].dtype.kind == "f" else None
    return out


def texts(frame: pd.DataFrame, digits: int = DIGITS) -> pd.DataFrame:
    """Every cell as `cell` prints it; an envelope's rows without a winner say "-" there."""
    typed = with_integers(frame)
    out = pd.DataFrame(
        {c: [cell(v, c, digits) for v in typed[c].tolist()] for c in frame.columns},
        index=frame.index,
        dtype=object,
    )
    if "certified_accuracy" in frame and "trial_id" in frame:
        nobody = (frame["certified_accuracy"] <= 0).to_numpy()
        winner = [c for c in frame.columns if c not in no_winner_columns(frame)]
        out.loc[nobody, winner] = "-"
    for column, beyond in unreachable(frame).items():
        out.loc[beyond, column] = BEYOND
    return out


BEYOND = "n/a"  # a radius larger than any the model(s) could certify: not a measured 0


def unreachable(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per accuracy column, the rows where its radius exceeds `max_radius` (the largest radius
    the row's model, or any model of its group, can certify): 0 there says nothing."""
    if "max_radius" not in frame:
        return {}
    reach = frame["max_radius"].to_numpy(dtype=np.float64) + 1e-9
    out = {}
    if "certified_accuracy" in frame and "radius" in frame:
        out["certified_accuracy"] = frame["radius"].to_numpy(dtype=np.float64) > reach
    for c in frame.columns:
        if (r := radius_of(c, interval=True)) is not None:
            out[c] = r > reach
    return out


CI_LOW, CI_HIGH = "_ci_low", "_ci_high"  # suffixes of a radius column's interval


def radius_of(column: object, interval: bool = False) -> float | None:
    """The radius of a per-radius accuracy column (`r=0.25` -> 0.25; with `interval` also of
    its interval's `r=0.25_ci_low`, `_ci_high`); None for any other column (`r=0.25_upper`)."""
    text = str(column)
    if interval:
        text = text.removesuffix(CI_LOW).removesuffix(CI_HIGH)
    if not text.startswith("r="):
        return None
    try:
        return float(text[2:])
    except ValueError:
        return None


def with_intervals(table: pd.DataFrame) -> pd.DataFrame:
    """The per-model `table` with, after each radius column, the 95% Clopper–Pearson interval
    of that certified accuracy over the model's points (`results.envelope_uncertainty`) as
    `r=0.25_ci_low` and `r=0.25_ci_high`: null where nothing was measured (beyond the
    model's largest certifiable radius, a pruned model)."""
    from sweeper.results.envelope_uncertainty import clopper_pearson

    out = table.copy()
    points = pd.to_numeric(table["points"], errors="coerce").to_numpy(dtype=np.float64)
    reach = table["max_radius"].to_numpy(dtype=np.float64) + 1e-9
    for c in [c for c in table.columns if radius_of(c) is not None]:
        acc = pd.to_numeric(table[c], errors="coerce").to_numpy(dtype=np.float64)
        known = ~np.isnan(acc) & (points > 0) & ~(float(str(c)[2:]) > reach)
        k, n = np.where(known, np.round(acc * points), 0), np.where(known, points, 1)
        low, high = clopper_pearson(k, n)
        at = list(out.columns).index(c) + 1
        out.insert(at, f"{c}{CI_LOW}", np.where(known, low, np.nan))
        out.insert(at + 1, f"{c}{CI_HIGH}", np.where(known, high, np.nan))
    return out


def no_winner_columns(table: pd.DataFrame) -> list[str]:
    """An envelope's columns that are no winner's: its group, the radius, what is measured."""
    group = [table.columns[0]] if table.columns[0] != "radius" else []
    return [*group, *(c for c in table.columns if c in NOT_WINNER)]


def to_markdown(frame: pd.DataFrame, blank: str = "") -> str:
    """A markdown table; missing values as `blank`."""
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| "
        + " | ".join(cell(v, c) or blank for c, v in zip(frame.columns, row, strict=True))
        + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def render(frame: pd.DataFrame, fmt: str) -> str:
    """csv, json (records) or markdown text of a table."""
    if fmt == "csv":
        return with_integers(frame).to_csv(index=False)
    if fmt == "json":
        return with_integers(frame).to_json(orient="records", indent=1)
    if fmt == "markdown":
        return to_markdown(frame)
    raise ValueError(f"unknown format {fmt!r} (valid: {', '.join(FORMATS)})")


def envelope_figure(
    frame: pd.DataFrame,
    by: str | None = None,
    title: str = "",
    empirical: pd.DataFrame | None = None,
    radii=None,
    cover: Cover | None = None,
) -> FigureData:
    """The data of `sweeper envelope --plot`: the envelope per `by` group and over all
    models, from 0 to the largest of `radii` (if given); `empirical` (columns radius,
    empirical_accuracy) as dashed points; `cover` (group value, or None for the envelope
    over all; the curve's radii and accuracies) -> whether each value is covered by the
    envelope strategy's guarantee (`api.envelope_view.plot_cover`)."""
    top = None if radii is None else list(radii)
    if empirical is not None and len(empirical) and top is None:
        top = [float(frame["radius"].max()) * 1.02, float(empirical["radius"].max())]
    grid = radius_grid(frame, radii=top)
    curves: list[Curve] = []
    if by is not None:
        for value, part in frame.groupby(by, dropna=False):
            accuracy = envelope_curve(part, grid)
            seen = cover(value, grid, accuracy) if cover else None
            curves.append(Curve(value_label(by, value), accuracy, covered=seen))
    accuracy = envelope_curve(frame, grid)
    seen = cover(None, grid, accuracy) if cover else None
    curves.append(Curve("upper envelope", accuracy, envelope=True, covered=seen))
    dashed = []
    if empirical is not None and len(empirical):
        points = empirical.sort_values("radius")
        dashed.append(
            (
                points["radius"].to_numpy(),
                points["empirical_accuracy"].to_numpy(),
                "empirical (SmoothAdv-PGD)",
            )
        )
    caption = title or f"{frame['trial_id'].nunique()} models"
    return FigureData("envelope", caption, grid, curves, dashed)


def plot_envelope(
    frame: pd.DataFrame,
    location: str,
    by: str | None = None,
    title: str = "",
    empirical: pd.DataFrame | None = None,
    radii=None,
    cover: Cover | None = None,
) -> None:
    """Certified accuracy vs ℓ2 radius (`envelope_figure`), written to `location` (format
    from its suffix: .png, .pdf, .svg)."""
    figure = envelope_figure(frame, by, title, empirical, radii, cover)
    data = render_figure(figure, location.rsplit(".", 1)[-1].lower())
    fileio.write_bytes_atomic(location, data)


def per_model_table(frame: pd.DataFrame, radii: list[float]) -> pd.DataFrame:
    """One row per model: method, σ and the hyperparameters that tell the models apart,
    certified accuracy per radius (columns "r=0.25", ...) each with its 95% interval over the
    points (`with_intervals`), ACR and the number of points; sorted by ACR."""
    models = model_table(frame)
    acc = certified_accuracy(frame, radii)
    acc.columns = [f"r={r:g}" for r in radii]
    keys = distinguishing_columns(models)
    if "cert_id" in models:  # the same trial certified under both strategies: say which
        models["strategy"] = models["cert_id"].map(strategy_of)
        keys += ["strategy"] if models["strategy"].nunique() > 1 else []
    reach = pd.DataFrame({"max_radius": max_radii(frame)})
    setting = models[["cert_id"]] if "cert_id" in models else None  # names it in csv/json
    parts = [models[["trial_id", *keys]], acc, models[["acr", "points"]], reach, setting]
    table = with_intervals(pd.concat(parts, axis=1))
    return table.sort_values(["acr", "trial_id"], ascending=[False, True], ignore_index=True)


def best_rows(table: pd.DataFrame) -> dict[str, set[int]]:
    """For each certified-accuracy column and ACR: the rows holding its maximum (ties: all)."""
    scored = [c for c in table.columns if str(c).startswith("r=") and "_" not in str(c)]
    scored.append("acr")
    return {
        c: set(table.index[np.isclose(table[c], table[c].max())])
        for c in scored
        if table[c].max() > 0
    }
