"""Rendering results: text formats for tables and matplotlib figures like the paper's Figure 1."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd

from sweeper.report.formats import FORMATS
from sweeper.report.tables import (  # noqa: F401  (KEY_COLUMNS, SETTING_COLUMNS: were defined here)
    KEY_COLUMNS,
    SETTING_COLUMNS,
    distinguishing_columns,
)
from sweeper.results.envelope import certified_accuracy, envelope_curve, model_table
from trainables import fileio


def cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def to_markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def render(frame: pd.DataFrame, fmt: str) -> str:
    """csv, json (records) or markdown text of a table."""
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "json":
        return frame.to_json(orient="records", indent=1)
    if fmt == "markdown":
        return to_markdown(frame)
    raise ValueError(f"unknown format {fmt!r} (valid: {', '.join(FORMATS)})")


def plot_envelope(
    frame: pd.DataFrame,
    location: str,
    by: str | None = None,
    title: str = "",
    empirical: pd.DataFrame | None = None,
) -> None:
    """Certified accuracy vs ℓ2 radius: the sweep's upper envelope (and one per `by` group),
    written to `location` (format from its suffix: .png, .pdf, .svg). `empirical` (columns
    radius, empirical_accuracy) adds the empirical accuracy under attack as a dashed curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top = float(frame["radius"].max()) if len(frame) else 1.0
    if empirical is not None and len(empirical):
        top = max(top, float(empirical["radius"].max()))
    radii = np.linspace(0.0, max(top, 1e-6) * 1.02, 400)
    fig, ax = plt.subplots(figsize=(6, 4))
    if by is not None:
        for value, part in frame.groupby(by, dropna=False):
            ax.plot(radii, envelope_curve(part, radii), label=f"{by}={value}", linewidth=1.2)
    ax.plot(radii, envelope_curve(frame, radii), color="black", linewidth=2, label="upper envelope")
    if empirical is not None and len(empirical):
        points = empirical.sort_values("radius")
        ax.plot(points["radius"], points["empirical_accuracy"], color="black", linestyle="--",
                marker="o", markersize=3, linewidth=1.5, label="empirical (SmoothAdv-PGD)")  # fmt: skip
    ax.set_xlabel("ℓ2 radius")
    ax.set_ylabel("certified accuracy")
    ax.set_ylim(0, 1)
    ax.set_xlim(0, radii[-1])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or f"{frame['trial_id'].nunique()} models")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=location.rsplit(".", 1)[-1].lower(), bbox_inches="tight", dpi=150)
    plt.close(fig)
    fileio.write_bytes_atomic(location, buffer.getvalue())


def per_model_table(frame: pd.DataFrame, radii: list[float]) -> pd.DataFrame:
    """One row per model: method, σ and the hyperparameters that tell the models apart,
    certified accuracy per radius (columns "r=0.25", ...), ACR and the number of points;
    sorted by ACR."""
    models = model_table(frame)
    acc = certified_accuracy(frame, radii)
    acc.columns = [f"r={r:g}" for r in radii]
    keys = distinguishing_columns(models)
    table = pd.concat([models[["trial_id", *keys]], acc, models[["acr", "points"]]], axis=1)
    return table.sort_values(["acr", "trial_id"], ascending=[False, True], ignore_index=True)


def best_rows(table: pd.DataFrame) -> dict[str, set[int]]:
    """For each certified-accuracy column and ACR: the rows holding its maximum (ties: all)."""
    scored = [c for c in table.columns if c.startswith("r=")] + ["acr"]
    return {
        c: set(table.index[np.isclose(table[c], table[c].max())])
        for c in scored
        if table[c].max() > 0
    }
