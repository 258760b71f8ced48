"""Validating a stage's files before any of their rows is used (`reader` reads through it):
each file's footer (schema, row count), a readable scan (a damaged page names its file), and
its rows against their path, the stage's own checks and (certification) `provenance`. A file
that fails is named with the first thing wrong, and its rows left out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sweeper.results.file_checks import file_footer, footer_problem
from sweeper.results.stage_table import StageTable
from sweeper.results.storage import Experiment, StageFile
from trainables.kernel import fileio
from trainables.kernel.catalog import NUM_CLASSES


def read_valid(exp: Experiment, stage: StageTable, files: list[StageFile], cols: list[str]):
    """(the rows of the files that validate, ["path: problem" of those that do not])."""
    if not files:
        return stage.schema.empty_table().select(cols), []
    footers = {f.path: file_footer(f.path) for f in files}
    invalid = {f.path: p for f in files if (p := footer_problem(f, footers[f.path], stage.schema))}
    good = [f for f in files if f.path not in invalid]
    good, table, unreadable = scan_readable(good, stage.schema, [*cols, "__fragment_index"])
    invalid.update(unreadable)
    metadata = [footers[f.path].schema.metadata for f in good]  # type: ignore[union-attr]
    problems = row_problems(exp, stage, table, good, metadata=metadata)
    invalid.update({good[i].path: p for i, p in problems.items()})
    keep = np.isin(table.column("__fragment_index").to_numpy(), list(problems), invert=True)
    table = table.filter(pa.array(keep)).drop_columns(["__fragment_index"])
    return table, [f"{path}: {problem}" for path, problem in invalid.items()]


def scan_readable(files: list[StageFile], schema: pa.Schema, cols: list[str]):
    """(the files whose rows read, their rows in one scan, {path: why} of those that do not).
    A file whose footer reads may still hold a damaged page: when the one scan fails, each
    file is scanned alone and those that fail are named; if none does, the failure is not a
    file's and is raised."""
    try:
        return files, scan([f.path for f in files], schema, cols), {}
    except (OSError, pa.ArrowInvalid) as e:
        failure = e
    unreadable = {}
    for f in files:
        try:
            scan([f.path], schema, cols)
        except (OSError, pa.ArrowInvalid) as e:
            unreadable[f.path] = unreadable_reason(e)
    if not unreadable:
        raise failure
    readable = [f for f in files if f.path not in unreadable]
    return readable, scan([f.path for f in readable], schema, cols), unreadable


def unreadable_reason(e: Exception) -> str:
    return f"not a readable Parquet file ({str(e).splitlines()[0]})"


def scan(paths: list[str], schema: pa.Schema, cols: list[str]) -> pa.Table:
    if not paths:
        return (
            schema.empty_table()
            .append_column("__fragment_index", pa.array([], pa.int32()))
            .select(cols)
        )
    import pyarrow.dataset as pads  # pandas with it, on the readers only (not the workers)

    fs, _ = fileio.filesystem(paths[0])
    local = [fileio.filesystem(p)[1] for p in paths]
    table = pads.dataset(local, format="parquet", filesystem=fs, schema=schema).to_table(
        columns=cols
    )
    return _legacy_values(table)


def _legacy_values(table: pa.Table) -> pa.Table:
    """Values of a legacy-typed column as its current type means them: amp false/true (cast
    to "false"/"true" by the scan) become off/fp16."""
    if "amp" not in table.column_names:
        return table
    amp = table.column("amp")
    meant = pc.if_else(
        pc.equal(amp, "true"), "fp16", pc.if_else(pc.equal(amp, "false"), "off", amp)
    )
    return table.set_column(table.column_names.index("amp"), "amp", meant)


def row_problems(
    exp: Experiment,
    stage: StageTable,
    table: pa.Table,
    files: list[StageFile],
    identified: bool = False,
    metadata: list | None = None,
) -> dict[int, str]:
    """fragment (file) index -> the first thing wrong with its rows. `identified`: each row's
    fragment was found from its own trial_id and setting (cache rows), so they match;
    `metadata`: each file's Parquet metadata (None: not read), for the stage's `consistent`."""
    if not table.num_rows:
        return {}
    frag = table.column("__fragment_index").to_numpy()
    problems: dict[int, str] = {}
    checks = _identity_checks(exp, stage, table, files, frag, identified) + stage.check(table)
    if stage.consistent is not None:
        checks += stage.consistent(exp, table, files, frag, metadata)
    for bad, what in checks:
        for i in np.unique(frag[np.asarray(bad, dtype=bool)]):
            problems.setdefault(int(i), what)
    return problems


def _identity_checks(exp, stage, table, files, frag, identified) -> list[tuple[np.ndarray, str]]:
    """Rows whose experiment, trial_id or setting is not what their file's path says, rows
    without a test point (its number null or negative), and test points a model already has
    (within a file, or in an earlier file of the model)."""
    checks = [(_differs(table.column("experiment"), exp.name), f"experiment is not {exp.name!r}")]
    if not identified:
        take = pa.array(frag)
        trial = pa.array([f.trial_id for f in files]).take(take)
        setting = pa.array([f.setting_id for f in files]).take(take)
        checks += [
            (_differs(table.column("trial_id"), trial), "trial_id is not the one its path names"),
            (
                _differs(table.column(stage.setting_column), setting),
                f"{stage.setting_column} is not the one its path names",
            ),
        ]
    models = {m: i for i, m in enumerate(dict.fromkeys(f.model for f in files))}
    model = np.array([models[f.model] for f in files], dtype=np.int64)[frag]
    idx = int_column(table, "idx")
    order = np.lexsort((idx, model))  # by model, then test point; a stable sort: in row order
    first, then = order[:-1], order[1:]
    repeated = np.zeros(len(idx), dtype=bool)
    repeated[then] = (model[then] == model[first]) & (idx[then] == idx[first])
    return [
        *checks,
        (idx < 0, "a test point number that is missing or negative"),
        (repeated, "test points the model already has (duplicated rows)"),
    ]


def _differs(column, expected) -> np.ndarray:
    """Rows where `column` is not `expected` (a scalar or an array); null differs too."""
    return pc.fill_null(pc.not_equal(column, expected), True).to_numpy(zero_copy_only=False)


def prediction_checks(table: pa.Table) -> list[tuple[np.ndarray, str]]:
    """What every stage's rows share: a label and a prediction (−1 abstains) within the data
    set's classes, and `correct` present and true exactly when the prediction is the label.
    Reads dataset, label, predict, correct."""
    label, predict, classes = (
        int_column(table, "label"),
        int_column(table, "predict"),
        _classes(table),
    )
    correct = table.column("correct")
    right = correct.fill_null(False).to_numpy(zero_copy_only=False)
    return [
        (correct.is_null().to_numpy(zero_copy_only=False), "correct is missing"),
        ((label < 0) | (label >= classes), "a label outside the data set's classes"),
        ((predict < -1) | (predict >= classes), "a prediction outside the data set's classes"),
        (
            right != ((predict == label) & (predict != -1)),
            "correct disagrees with predict and label",
        ),
    ]


def _classes(table: pa.Table) -> np.ndarray:
    """Each row's class count (from its `dataset` column; -1 for an unknown data set)."""
    names = list(NUM_CLASSES)
    where = pc.index_in(table.column("dataset"), value_set=pa.array(names)).fill_null(-1)
    counts = np.array([*NUM_CLASSES.values(), -1])
    return counts[where.to_numpy(zero_copy_only=False)]


def int_column(table: pa.Table, name: str) -> np.ndarray:
    """An integer column as int64, null as -2 (outside every valid range)."""
    return table.column(name).fill_null(-2).to_numpy(zero_copy_only=False).astype(np.int64)


def float_column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False).astype(float)
