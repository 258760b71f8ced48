"""The paper's figures: the curves (pure) and their rendering with matplotlib (to bytes).

SmoothAdv (Salman et al. 2019) Figure 1: the upper envelope over all models (left), the
envelope per σ (middle) and one representative model per σ (right; here the model with the
best ACR of that σ, ties to the higher clean accuracy, then the smaller trial_id); appendix C:
the envelope per method (Fig. 4: SmoothAdv vs vanilla PGD vs PGD + noise vs Gaussian), per
m_train (Fig. 5) and per ε (Fig. 6). A figure is made only when the column it compares takes
at least two values in the data; otherwise `figure_plan` says why it was skipped.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sweeper.report.formats import COLUMN_LABELS
from sweeper.results.envelope import certified_accuracy, model_table
from trainables.methods import method_label

SMOOTHADV = "smoothadv"
SYMBOLS = {k: COLUMN_LABELS[k] for k in ("sigma", "epsilon", "m_train", "steps")}  # legends
# (file stem, column compared, restrict to SmoothAdv models when there are some, what it shows)
GROUPED = [
    ("envelope_by_sigma", "sigma", False, "Upper envelope per training σ (Fig. 1, middle)"),
    ("envelope_by_method", "method", False, "Upper envelope per method (Fig. 4)"),
    ("envelope_by_attack", "attack", True, "Upper envelope per SmoothAdv attack (PGD vs DDN)"),
    (
        "envelope_by_m_train",
        "m_train",
        True,
        "Upper envelope per m_train, the noise draws per input (Fig. 5)",
    ),
    ("envelope_by_epsilon", "epsilon", True, "Upper envelope per attack radius ε (Fig. 6)"),
    ("envelope_by_smoothing", "smoothing", False, "Upper envelope with fixed vs data-dependent σ"),
]


# (a group's value, or None for the envelope over all; radii; accuracies) -> covered per radius
Cover = Callable[[Any, np.ndarray, np.ndarray], np.ndarray]


@dataclass
class Curve:
    label: str
    accuracy: np.ndarray
    envelope: bool = False  # the "upper envelope" line, drawn thick and grey underneath
    # per radius, whether the envelope strategy's guarantee covers the value (None: all);
    # what it does not cover is drawn dotted (a lower bound of full certification's)
    covered: np.ndarray | None = None


@dataclass
class FigureData:
    name: str  # file stem
    caption: str
    radii: np.ndarray
    curves: list[Curve]
    dashed: list[tuple[Any, Any, str]] = field(default_factory=list)  # (x, y, label) points


def radius_grid(frame: pd.DataFrame, points: int = 400, radii=None) -> np.ndarray:
    """Radii to draw curves at: from 0 to the largest of `radii` if given (a figure shows
    what was asked for), else just past the largest certified radius."""
    if radii is not None and len(radii) and max(radii) > 0:
        return np.linspace(0.0, float(max(radii)), points)
    top = float(frame["radius"].max()) if len(frame) else 1.0
    return np.linspace(0.0, max(top, 1e-6) * 1.02, points)


def value_label(column: str, value) -> str:
    if column == "method":
        return method_label(value)
    if column == "attack":
        return method_label(SMOOTHADV, value)
    if isinstance(value, (float, np.floating)):
        value = f"{value:g}"
    return f"{SYMBOLS[column]} = {value}" if column in SYMBOLS else str(value)


def describe(model: pd.Series) -> str:
    """A model in a legend: method and its attack hyperparameters."""
    parts = [method_label(model["method"], model.get("attack"))]
    for column in ("epsilon", "steps", "m_train"):
        value = model.get(column)
        if value is not None and pd.notna(value):
            parts.append(value_label(column, value))
    return ", ".join(parts)


def figure_plan(frame: pd.DataFrame) -> tuple[list[FigureData], list[str]]:
    """The figures the data supports, and a note for each one skipped. Every curve is the
    maximum of some models' curves, computed once (models × radii)."""
    grid = radius_grid(frame)
    models = model_table(frame)
    accuracy = certified_accuracy(frame, list(grid)).to_numpy()
    whole = Curve("upper envelope", accuracy.max(axis=0), envelope=True)
    caption = f"Upper envelope over all {len(models)} models (Fig. 1, left)"
    figures, notes = [FigureData("envelope", caption, grid, [whole])], []
    for name, column, smoothadv, caption in GROUPED:
        made = [grouped_figure(models, accuracy, grid, name, column, smoothadv, caption)]
        if name == "envelope_by_sigma":
            made.append(representative_figure(models, accuracy, grid))
        figures += [f for f, _ in made if f is not None]
        notes += [n for _, n in made if n is not None]
    return figures, notes


def grouped_figure(
    models: pd.DataFrame,
    accuracy: np.ndarray,
    grid: np.ndarray,
    name: str,
    column: str,
    smoothadv: bool,
    caption: str,
) -> tuple[FigureData | None, str | None]:
    """One envelope per value of `column` (over SmoothAdv's models if `smoothadv` and there
    are some), plus the envelope of them all. `accuracy`: one curve per row of `models`."""
    member, who = np.ones(len(models), dtype=bool), "all models"
    if smoothadv and (models["method"] == SMOOTHADV).any():
        member, who = (models["method"] == SMOOTHADV).to_numpy(), "the SmoothAdv models"
    member = member & models[column].notna().to_numpy()
    values = sorted(models.loc[member, column].unique().tolist())
    if len(values) < 2:
        shown = ", ".join(value_label(column, v) for v in values) or "no value"
        return None, f"{name}: skipped, {column} does not vary among {who} ({shown})"
    curves = [
        Curve(value_label(column, v), accuracy[member & (models[column] == v).to_numpy()].max(0))
        for v in values
    ]
    curves.append(Curve("upper envelope", accuracy[member].max(axis=0), envelope=True))
    if column == "method":  # the title names the methods drawn, and only those
        caption += ": " + " vs ".join(c.label for c in curves[:-1])
    return FigureData(name, f"{caption}, over {who}", grid, curves), None


def representatives(models: pd.DataFrame) -> pd.DataFrame:
    """Per training σ, the model (a row of `model_table`) with the best ACR (ties: higher
    clean accuracy, then the smaller trial_id, cert_id); its position is the column `row`."""
    ranked = models.reset_index(names="row").sort_values(
        ["sigma", "acr", "clean_acc", "trial_id", "cert_id"],
        ascending=[True, False, False, True, True],
    )
    return ranked.groupby("sigma", sort=True).head(1).reset_index(drop=True)


def representative_figure(
    models: pd.DataFrame, accuracy: np.ndarray, grid: np.ndarray
) -> tuple[FigureData | None, str | None]:
    picks = representatives(models)
    if len(picks) < 2:
        return None, "representative_per_sigma: skipped, σ does not vary"
    curves = [
        Curve(f"σ = {m['sigma']:g}: {describe(m)} (ACR {m['acr']:.3f})", accuracy[int(m["row"])])
        for _, m in picks.iterrows()
    ]
    caption = "One representative model per σ, the one with the best ACR (Fig. 1, right)"
    return FigureData("representative_per_sigma", caption, grid, curves), None


def draw_figure(figure: FigureData):
    """The matplotlib Figure of `figure` (tests read its lines; `render_figure` saves it).
    The envelope is drawn first, thick, grey and underneath (zorder 1), every group's curve
    over it (zorder 2), so a group that coincides with the envelope stays visible; the legend
    sits right of the axes, never over a curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in sorted(figure.curves, key=lambda c: not c.envelope):
        style = (
            {"color": "0.6", "linewidth": 3.5, "zorder": 1}
            if c.envelope
            else {"linewidth": 1.3, "zorder": 2}
        )
        _draw_curve(ax, figure.radii, c, style)
    for x, y, label in figure.dashed:
        ax.plot(
            x,
            y,
            color="black",
            linestyle="--",
            marker="o",
            markersize=3,
            linewidth=1.5,
            label=label,
            zorder=3,
        )
    ax.set_xlabel("ℓ2 radius")
    ax.set_ylabel("certified accuracy")
    ax.set_ylim(0, 1)
    ax.set_xlim(0, figure.radii[-1])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    ax.set_title(figure.caption, fontsize=8, wrap=True)
    return fig


def _draw_curve(ax: Any, radii: np.ndarray, c: Curve, style: dict[str, Any]) -> None:
    """A curve, solid where covered and dotted (same colour) where not: each uncovered run
    widened by one radius on each side, so the two styles meet."""
    if c.covered is None or c.covered.all():
        ax.plot(radii, c.accuracy, label=c.label, **style)
        return
    line = ax.plot(radii, np.where(c.covered, c.accuracy, np.nan), label=c.label, **style)[0]
    off = ~c.covered
    near = off | np.r_[off[1:], False] | np.r_[False, off[:-1]]
    label = "not covered: a lower bound" if c.envelope else None
    dotted = {**style, "color": line.get_color(), "linestyle": ":"}
    ax.plot(radii, np.where(near, c.accuracy, np.nan), label=label, **dotted)


def render_figure(figure: FigureData, fmt: str) -> bytes:
    """The figure as a .png, .pdf or .svg file's bytes."""
    import matplotlib.pyplot as plt

    fig = draw_figure(figure)
    buffer = io.BytesIO()
    # zlib's level 6 costs most of a PNG save; pdf and svg take no pil_kwargs
    fast: dict[str, Any] = {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}
    fig.savefig(buffer, format=fmt, bbox_inches="tight", dpi=150, **fast)
    plt.close(fig)
    return buffer.getvalue()
