"""The paper's tables as DataFrames: pure computations on a results table, no I/O.

SmoothAdv (Salman et al. 2019) appendix E: certified accuracy of every model per ℓ2 radius,
one table per method/attack/T with the Gaussian baselines on top and the best entry per
radius in bold; main-text Tables 1-2 and NeurIPS Table 17: the upper envelope per radius with
the winner's clean ("standard") accuracy; NeurIPS Table 4: the certification abstention rate
of the winners; NeurIPS Table 5: ℓ∞ certified accuracy implied by ℓ2 (an ℓ∞ ball of radius ρ
lies inside the ℓ2 ball of radius ρ·√d, so an ℓ2 certificate of radius r certifies ℓ∞ radius
r/√d); and the average certified radius (ACR) of every model and of the winners.

Numbers are fractions (not %). A `PaperTable` holds raw values; rendering is in `report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sweeper.report.formats import LINF_RADII_255
from sweeper.results import envelope as env
from sweeper.results.certify_rows import MODEL_KEY, identity_fields
from sweeper.results.columns import SUMMARY_COLUMNS
from sweeper.results.envelope import certified_accuracy, model_table
from sweeper.results.final_numbers import envelope_with_final
from trainables.kernel.cert_ids import CertId
from trainables.kernel.final_points import final_of
from trainables.methods import REGISTRY, method_label

if TYPE_CHECKING:
    from sweeper.report.figures import Cover

KEY_COLUMNS = ["method", "sigma", "attack", "epsilon", "steps", "m_train", "lam", "eta", "mix_step"]
SETTING_COLUMNS = ["smoothing", "sigma_cert", "n0", "n", "alpha"]
BASELINE = "gaussian"
ALL = "all"  # the group of every model in an envelope summary
WINNER_COLUMNS = [
    "clean_acc",
    "acr",
    "abstain_rate",
    "trial_id",
    "cert_id",
    "smoothing",
    *SUMMARY_COLUMNS,
]
# Shown in every per-model table (when not all null), as in appendix E's "σ = .. ε = .." rows.
ALWAYS_SHOWN = ["sigma", "epsilon", "m_train"]
GROUP_KEYS = ["method", "attack", "steps"]  # one per-model table per value (in its title)


@dataclass
class PaperTable:
    """One table: raw values, a title, the cells to print in bold (column -> row positions)
    and, optionally, a column whose repeated values are printed once (appendix E sections)."""

    title: str
    data: pd.DataFrame
    bold: dict[str, set[int]] = field(default_factory=dict)
    sections: str | None = None
    beyond: dict[str, set[int]] = field(default_factory=dict)  # cells past the largest radius
    # cells the envelope strategy's guarantee does not cover: lower bounds, printed with ≥
    partial: dict[str, set[int]] = field(default_factory=dict)


def radius_column(r: float) -> str:
    return f"r={r:g}"


def linf_column(k: float) -> str:
    return f"linf={k:g}/255"


def distinguishing_columns(models: pd.DataFrame) -> list[str]:
    """method, σ and the hyperparameters/certification settings that vary between models."""
    candidates = [c.name for c in identity_fields()] + SETTING_COLUMNS
    varying = [c for c in candidates if c in models and models[c].nunique(dropna=True) > 1]
    if "sigma_cert" in varying and (models["smoothing"] == "data-dependent").any():
        varying.remove("sigma_cert")  # per point under DDRS: a model's first point says nothing
    if "sigma_cert" in varying and np.allclose(models["sigma_cert"], models["sigma"]):
        varying.remove("sigma_cert")  # certified at the training σ: nothing to tell apart
    keys = [c for c in KEY_COLUMNS if c in models and (c in varying or c in ("method", "sigma"))]
    return keys + [c for c in varying if c not in keys]


def best_positions(data: pd.DataFrame, columns: list[str]) -> dict[str, set[int]]:
    """Per column, the row positions holding its maximum (ties: all); none if it is 0."""
    best = {}
    for c in columns:
        values = data[c].to_numpy(dtype=np.float64)
        if len(values) and np.nanmax(values, initial=0.0) > 0:
            best[c] = set(np.flatnonzero(np.isclose(values, np.nanmax(values))).tolist())
    return best


# ---------------------------------------------------------------------------- per model
def models_with_accuracy(frame: pd.DataFrame, radii: list[float]) -> pd.DataFrame:
    """`model_table` plus one certified-accuracy column per radius ("r=0.25", ...)."""
    models = model_table(frame)
    acc = certified_accuracy(frame, radii)
    acc.columns = [radius_column(r) for r in radii]
    return pd.concat([models, acc], axis=1).assign(max_radius=env.max_radii(frame))


def group_title(method, attack, steps) -> str:
    title = method_label(method, attack)
    return f"{title}, T = {steps:g}" if pd.notna(steps) else title


def per_model_tables(frame: pd.DataFrame, radii: list[float]) -> list[PaperTable]:
    """Appendix E: one table per (method, attack, T) with its models as rows (sorted by
    m_train, σ, ε), the Gaussian baselines first; certified accuracy per ℓ2 radius and ACR,
    the best of each column (over the table, baselines included) in bold."""
    models = models_with_accuracy(frame, radii)
    keys = distinguishing_columns(models)
    labels = ALWAYS_SHOWN + [k for k in keys if k not in ALWAYS_SHOWN + GROUP_KEYS]
    base = models[models["method"] == BASELINE]
    others = models[models["method"] != BASELINE]
    if others.empty:
        return [_model_table([(method_label(BASELINE), base)], labels, radii)]
    baseline = [(method_label(BASELINE), base)] if len(base) else []
    return [
        _model_table([*baseline, (group_title(*key), group)], labels, radii)
        for key, group in others.groupby(GROUP_KEYS, dropna=False, sort=True)
    ]


def _model_table(
    sections: list[tuple[str, pd.DataFrame]], labels: list[str], radii: list[float]
) -> PaperTable:
    order = [c for c in ["m_train", "sigma", "epsilon", *labels] if c in labels]
    order = list(dict.fromkeys(order)) + MODEL_KEY
    rows = pd.concat(
        [
            part.sort_values(order, na_position="first").assign(section=name)
            for name, part in sections
        ],
        ignore_index=True,
    )
    shown = [c for c in labels if c in rows and rows[c].notna().any()]
    if rows["points"].nunique() > 1:
        shown.append("points")  # partial results: say how many points each model has
    scores = [radius_column(r) for r in radii] + ["acr"]
    data = rows[["section", *shown, *scores, "trial_id"]]
    title = sections[-1][0]
    if len(sections) > 1:
        title += f" (with the {method_label(BASELINE)} baselines)"
    reach = rows["max_radius"].to_numpy() + 1e-9
    beyond = {radius_column(r): set(np.flatnonzero(r > reach).tolist()) for r in radii}
    return PaperTable(title, data, best_positions(data, scores), sections="section", beyond=beyond)


def acr_table(frame: pd.DataFrame) -> PaperTable:
    """Every model's ACR, clean accuracy and abstention rate, best ACR first."""
    models = model_table(frame)
    keys = distinguishing_columns(models)
    models["method"] = [
        method_label(m, a) for m, a in zip(models["method"], models["attack"], strict=True)
    ]
    keys = [k for k in keys if k != "attack"]  # in the method's label
    columns = [*keys, "clean_acc", "acr", "abstain_rate", "points", "trial_id"]
    data = models[list(dict.fromkeys(columns))].sort_values(
        ["acr", "clean_acc", "trial_id"], ascending=[False, False, True], ignore_index=True
    )
    title = "Average certified radius (ACR) per model, best first"
    return PaperTable(title, data, best_positions(data, ["clean_acc", "acr"]))


# ----------------------------------------------------------------------------- envelope
def envelope_summary(
    frame: pd.DataFrame, radii: list[float], cover: Cover | None = None
) -> pd.DataFrame:
    """Per radius: the upper envelope over all models (group "all") and, when the sweep has
    several methods, over each method's models (group = the method); with the winner's clean
    accuracy, ACR, abstention rate and identity. Where the accuracy is 0 nobody wins: the
    winner's columns are null. `cover` (a method, or None for all; radii; accuracies): whether
    the envelope strategy's guarantee covers each number (`covered`; True without it)."""
    parts = []
    if frame["method"].nunique() > 1:
        per = envelope_with_final(frame, radii, by="method")
        parts.append(per.assign(group=per["method"].to_numpy()))
    parts.append(envelope_with_final(frame, radii).assign(group=ALL))
    for part in parts:
        part["covered"] = True
        if cover is None:
            continue
        for group, rows in part.groupby("group").groups.items():
            accuracy = part.loc[rows, "certified_accuracy"].to_numpy(dtype=np.float64)
            radius = part.loc[rows, "radius"].to_numpy(dtype=np.float64)
            part.loc[rows, "covered"] = cover(None if group == ALL else group, radius, accuracy)
    out = pd.concat(parts, ignore_index=True)
    rates = model_table(frame)[[*MODEL_KEY, "abstain_rate", "smoothing"]]
    out = out.merge(rates, on=MODEL_KEY, how="left")
    out["column"] = [radius_column(r) for r in out["radius"]]
    winners = [c for c in WINNER_COLUMNS if c in out]
    out[winners] = out[winners].astype(object)
    out.loc[out["certified_accuracy"] <= 0, winners] = None
    return out[
        [
            "group",
            "radius",
            "column",
            "certified_accuracy",
            *winners,
            "models",
            "max_radius",
            "covered",
        ]
    ]


def _group_order(groups) -> list:
    rank = {m: i for i, m in enumerate(REGISTRY)}
    methods = sorted((g for g in set(groups) if g != ALL), key=lambda g: (rank.get(g, 99), g))
    return [*methods, ALL] if ALL in set(groups) else methods


def _group_label(group) -> str:
    return "upper envelope (all models)" if group == ALL else method_label(group)


def wide_table(
    summary: pd.DataFrame, quantities: list[tuple[str, str]], title: str, bold: bool = False
) -> PaperTable:
    """Paper rows: per group, one row per quantity (e.g. certified accuracy, the winner's
    clean accuracy), one column per radius. `bold`: the best group per radius in the first
    quantity's rows (the "all" row aside)."""
    columns = list(dict.fromkeys(summary["column"]))
    rows: list[dict] = []
    beyond: dict[str, set[int]] = {c: set() for c in columns}
    partial: dict[str, set[int]] = {c: set() for c in columns}
    for group in _group_order(summary["group"]):
        part = summary[summary["group"] == group].set_index("column")
        for q, label in quantities:
            values = pd.to_numeric(part[q], errors="coerce")
            if q == "certified_accuracy":
                radius = part["radius" if "radius" in part else "l2_radius"]
                for c in part.index[radius > part["max_radius"] + 1e-9]:
                    beyond[c].add(len(rows))
                for c in part.index[~part["covered"].astype(bool)]:
                    partial[c].add(len(rows))
            rows.append({"models": _group_label(group), "quantity": label, **values.to_dict()})
    data = pd.DataFrame(rows, columns=["models", "quantity", *columns])
    marks: dict[str, set[int]] = {}
    first = list(data.index[data["quantity"] == quantities[0][1]])
    first = [i for i in first if data.at[i, "models"] != _group_label(ALL)]
    if bold and len(first) > 1:
        best = best_positions(data.loc[first].reset_index(drop=True), columns)
        marks = {c: {first[i] for i in rows_} for c, rows_ in best.items()}
    return PaperTable(title, data, marks, sections="models", beyond=beyond, partial=partial)


def winners_table(summary: pd.DataFrame, unattested: frozenset = frozenset()) -> PaperTable:
    """The overall envelope's winner per radius: accuracy, clean accuracy, ACR, abstention
    rate and configuration (blank where nobody certifies anything); a winner resting on an
    unattested file (`unattested`: (trial_id, cert_id)) has † after its trial_id."""
    part = summary[summary["group"] == ALL].reset_index(drop=True)
    part = part.assign(
        method=pd.Series(
            [
                method_label(m, a) if isinstance(m, str) else None
                for m, a in zip(part["method"], part["attack"], strict=True)
            ],
            index=part.index,
        )
    )
    scores = ["certified_accuracy", "clean_acc", "acr", "abstain_rate"]
    ids = [c for c in SUMMARY_COLUMNS if c != "attack" and part[c].notna().any()]
    if (part["smoothing"] == "data-dependent").any():
        ids = [c for c in ids if c != "sigma_cert"] + ["smoothing"]  # σ_cert varies per point
    elif "sigma_cert" in ids and not _certified_elsewhere(part):
        ids.remove("sigma_cert")
    data = part[["radius", *scores, *ids, "trial_id", "models"]].copy()
    nobody = (part["certified_accuracy"] <= 0).to_numpy()
    data[[*ids, "trial_id"]] = data[[*ids, "trial_id"]].astype(object)
    marked = [(t, c) in unattested for t, c in zip(part["trial_id"], part["cert_id"], strict=True)]
    data.loc[marked, "trial_id"] = data.loc[marked, "trial_id"] + " †"
    data.loc[nobody, [*ids, "trial_id"]] = "-"  # no winner where nothing is certified
    far = np.flatnonzero(part["radius"].to_numpy() > part["max_radius"].to_numpy() + 1e-9)
    title = "Upper envelope per ℓ2 radius and its winner"
    uncovered = set(np.flatnonzero(~part["covered"].to_numpy(dtype=bool)).tolist())
    return PaperTable(
        title,
        data,
        beyond={"certified_accuracy": set(far.tolist())},
        partial={"certified_accuracy": uncovered},
    )


def _certified_elsewhere(part: pd.DataFrame) -> bool:
    """Whether some winner was certified at a σ other than its training σ."""
    known = part[part["sigma_cert"].notna()]
    return not np.allclose(known["sigma_cert"].astype(float), known["sigma"].astype(float))


# --------------------------------------------------------------------------------- ℓ∞
def linf_summary(
    frame: pd.DataFrame, dim: int, linf_255=LINF_RADII_255, cover: Cover | None = None
) -> pd.DataFrame:
    """`envelope_summary` at the ℓ2 radii ρ·√d that certify the ℓ∞ radii ρ = k/255:
    columns `linf_255` (k), `linf_radius` (ρ), `l2_radius` and `column` ("linf=1/255")."""
    scale = math.sqrt(dim)
    l2 = [k / 255 * scale for k in linf_255]
    out = envelope_summary(frame, l2, cover)
    k_of = dict(zip(l2, linf_255, strict=True))
    out.insert(1, "linf_255", out["radius"].map(k_of))
    out.insert(2, "linf_radius", out["linf_255"] / 255)
    out = out.rename(columns={"radius": "l2_radius"})
    out["column"] = [linf_column(k) for k in out["linf_255"]]
    return out


def linf_table(summary: pd.DataFrame, dataset: str, dim: int) -> PaperTable:
    radii = ", ".join(
        f"{k:g}/255 (ℓ2 {r:.4g})"
        for k, r in dict(zip(summary["linf_255"], summary["l2_radius"], strict=True)).items()
    )
    title = (
        f"{dataset}: ℓ∞ certified accuracy implied by ℓ2 (d = {dim}, ℓ∞ radius = ℓ2 radius / "
        f"√d = ℓ2 radius / {math.sqrt(dim):.4g}); ℓ∞ radii {radii}"
    )
    quantities = [("certified_accuracy", "certified accuracy"), ("clean_acc", "winner clean acc.")]
    return wide_table(summary, quantities, title, bold=True)


# ----------------------------------------------------------------- certification settings


def _points_said(cert_id: str) -> list[str]:
    """Which test points a setting certified: the selection's skip and max_points, or the
    final step's report points (`final_points`)."""
    if (final := final_of(cert_id)) is not None:
        return [f"final step on {final[1].describe()} (selection: {final[0]})"]
    setting = CertId.parse(cert_id)
    if setting is None or setting.imported:
        return []
    top = "all" if setting.max_points is None else setting.max_points
    return [f"skip = {setting.skip}", f"max_points = {top}"]


def settings_lines(frame: pd.DataFrame, batch: int | None = None) -> list[str]:
    """One line per certification setting: n0, n, α, which test points (skip, at most how
    many), the batch size when known, how many models and points, and per training σ the
    largest radius that setting can certify (σ·Φ⁻¹(α^(1/n)); radii beyond it are n/a)."""
    models = model_table(frame).assign(max_radius=env.max_radii(frame))
    lines = []
    for cert_id, part in models.groupby("cert_id", sort=True):
        first = part.iloc[0]
        said = [f"n0 = {first['n0']:g}", f"n = {first['n']:g}", f"α = {first['alpha']:g}"]
        said += _points_said(str(cert_id))
        if batch is not None:
            said.append(f"batch_size = {batch}")
        models_ = f"{len(part)} model{'s' * (len(part) != 1)}"
        said.append(f"{models_}, {int(part['points'].max())} points each at most")
        reach = part.groupby("sigma", dropna=False)["max_radius"].max()
        bound = ", ".join(f"{r:.3f} at σ = {s:g}" for s, r in reach.items() if np.isfinite(r))
        dependent = (part["smoothing"] == "data-dependent").any()
        smoothing = " (data-dependent: at the largest σ_x)" if dependent else ""
        lines.append(
            f"{cert_id}: {', '.join(said)}; largest certifiable radius "
            f"σ·Φ⁻¹(α^(1/n)){smoothing}: {bound or 'unknown'}"
        )
    return lines
