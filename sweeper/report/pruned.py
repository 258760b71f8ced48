"""Models the `envelope` certification strategy pruned (issue 28), as the per-model table and
the report show them: marked `pruned`, with their upper bounds on certified accuracy, never as
zeros. In csv/json the bounds are numbers (columns `r=0.25_upper`, ...); in text formats each
pruned model's accuracy cell reads `≤0.42`."""

from __future__ import annotations

from typing import Any

import pandas as pd

from sweeper.report.formats import DIGITS
from sweeper.report.render import cell, radius_of
from sweeper.results.envelope_records import upper_accuracy

UPPER = "_upper"  # suffix of a radius column's upper bound ("r=0.25_upper")


def pruned_frame(models: list[dict[str, Any]], radii: list[float]) -> pd.DataFrame:
    """One row per pruned model (`envelope_records.pruned_models`): trial_id, cert_id, its
    config's columns, its points and its upper bound per radius ("r=0.25_upper")."""
    rows = []
    for m in models:
        upper = upper_accuracy(m["record"], radii)
        bounds = {f"r={r:g}{UPPER}": u for r, u in zip(radii, upper, strict=True)}
        ids = {"trial_id": m["trial_id"], "cert_id": m["cert_id"]}
        rows.append({**m["config"], **ids, "points": m["record"].get("points"), **bounds})
    return pd.DataFrame(rows)


def with_pruned(table: pd.DataFrame | None, pruned: pd.DataFrame, radii: list[float]):
    """The per-model `table` (None: no certified model) with a `status` column (`certified`
    or `pruned`), one row per pruned model (its accuracies and ACR null) and the upper bounds'
    columns; `table` as it is if nothing was pruned."""
    if pruned.empty:
        return table
    radius_cols = [f"r={r:g}" for r in radii]
    if table is None:  # only pruned models: their own columns, accuracies and ACR null
        from sweeper.report.tables import distinguishing_columns

        own = ["trial_id", *distinguishing_columns(pruned)]
        table = pd.DataFrame(columns=list(dict.fromkeys([*own, *radius_cols, "acr", "points"])))
    base = table
    keep = [c for c in base.columns if c in pruned.columns and c not in radius_cols]
    extra = pruned[keep + [f"{c}{UPPER}" for c in radius_cols]]
    out = pd.concat([base.assign(status="certified"), extra.assign(status="pruned")])
    out = out.reset_index(drop=True)
    first = ["trial_id", "status"]
    return out[first + [c for c in out.columns if c not in first]]


def pruned_texts(rows: pd.DataFrame, text: pd.DataFrame, digits: int = DIGITS) -> pd.DataFrame:
    """`text` (the cells of `rows`) with each pruned model's accuracy cells `≤0.42` and the
    upper bounds' own columns dropped."""
    if "status" not in rows:
        return text
    pruned = (rows["status"] == "pruned").to_numpy()
    upper = [c for c in rows.columns if str(c).endswith(UPPER)]
    for c in upper:
        values = rows.loc[pruned, c]
        text.loc[pruned, c.removesuffix(UPPER)] = [
            "-" if pd.isna(v) else f"≤{v:.{digits}f}" for v in values
        ]
    return text.drop(columns=upper)


def partial_texts(rows: pd.DataFrame, text: pd.DataFrame) -> pd.DataFrame:
    """`text` with the accuracy cells below a model's `exact_from` (and its ACR) marked `≥`:
    the envelope strategy certified that model only from that radius on (`Sweep.table`'s
    column), and without the columns that only say so (`cert_id`, `exact_from`)."""
    if "exact_from" in rows:
        for i, start in rows["exact_from"].items():
            if start is None or pd.isna(start):
                continue
            below = [c for c in text.columns if (r := radius_of(c)) is not None and r < start]
            for c in [*below, *(["acr"] if "acr" in text else [])]:
                cell = str(text.at[i, c])
                if cell not in ("", "-"):
                    text.at[i, c] = f"≥{cell}"
    return text.drop(columns=[c for c in ("cert_id", "exact_from") if c in text])


def pruned_section(pruned: pd.DataFrame, radii: list[float], delta_note: str = "") -> list[str]:
    """The report index's section on the pruned models: a markdown table of their upper
    bounds per radius (nothing if none was pruned)."""
    if pruned.empty:
        return []
    cols = [c for c in ("method", "sigma") if c in pruned]
    header = ["trial_id", *cols, *(f"r={r:g}" for r in radii)]
    lines = [
        "## Pruned by the envelope strategy",
        "",
        f"{len(pruned)} models were pruned: never certified, their certified accuracy at most "
        f"these upper bounds (from their pilot draws){delta_note}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for _, row in pruned.iterrows():
        bounds = [row[f"r={r:g}{UPPER}"] for r in radii]
        cells = [str(row["trial_id"]), *(cell(row[c], c) for c in cols)]
        cells += ["-" if pd.isna(b) else f"≤{b:.3f}" for b in bounds]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]
