"""Certification rows checked against what they claim to be: a real CERTIFY of a real trial.

A row's own n, α or σ cannot vouch for itself, so each check takes its truth from elsewhere:

- the setting: the cert_id in the file's path (checked equal to the rows' by the reader)
  names it, spelled by `CertifySpec.cert_id` (`sigma-<σ|train>_n0-…_n-…_alpha-…_skip-…_max-…`,
  run tags, a DDRS tag) or by `sweeper import` (`imported-sigma-<σ>-n-<n>-alpha-<α>`). Only
  the canonical spelling names one (`setting_of` parses it and writes it back), and only a
  setting the sweep declared counts (sweep.json: `sweep_file.declared`);
- the test points: the data set's test-split size (`trainables.kernel.catalog.STANDARD_TEST_SIZE`)
  and the grid the cert_id names (every skip-th point, at most max of them);
- the trial: one sweep.json lists, with its `trials/<trial_id>/trial.json`, whose config
  must hash to the trial_id; an imported model (cert_id `imported-…`) instead by its file's
  import record (the metadata
  `sweeper import` writes: `certify_backend` "imported from <log>" and the config, hashing to
  the trial_id). Its σ is the training σ of a `sigma-train` setting, and the rows' identity
  columns must be its hyperparameters;
- the certificate: p_lower, the abstention and the radius recomputed from the count, n, α and
  the row's σ (`sigma_cert`: σ_x per point under DDRS, at least its min σ), exactly as
  `trainables.smoothing` computes them (float rounding aside); the memory pass may change a
  DDRS certificate only where `memory_changed` says so, never to a larger ball of the class
  (an abstention may take a class: the authors' rule, `trainables.ddrs.memory_certify`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sweeper.results.storage import Experiment, StageFile
from sweeper.results.sweep_file import declared
from sweeper.results.trial_records import trial_configs
from trainables.kernel.catalog import STANDARD_TEST_SIZE
from trainables.kernel.certificates import lower_confidence_bound, radius_of_bound
from trainables.kernel.final_points import final_of
from trainables.kernel.stage_settings import ENVELOPE_MARK

OWN = re.compile(
    r"sigma-(?P<sigma>train|[^_]+)_n0-(?P<n0>\d+)_n-(?P<n>\d+)_alpha-(?P<alpha>[^_]+)"
    r"_skip-(?P<skip>\d+)_max-(?P<max>all|\d+)(?P<tags>(?:_prec-[a-z0-9]+)?(?:_cl)?(?:_compiled)?)"
    r"(?P<env>_envelope(?:-delta-[^_]+?)?(?:-pilots-\d+(?:-\d+)*)?(?:-radii-[\d.]+(?:-[\d.]+)*)?)?"
    r"(?:_ddrs-K(?P<K>\d+)-lr(?P<lr>.+?)-n(?P<samples>\d+)-min(?P<min>[^_]+))?"
)
IMPORTED = re.compile(r"imported-sigma-(?P<sigma>.+)-n-(?P<n>\d+)-alpha-(?P<alpha>.+)")
ALPHA_RTOL = 5e-6  # a cert_id prints α and σ with 6 significant digits (`:g`)
P_RTOL, RADIUS_ATOL = 1e-9, 1e-9  # recomputed with the same scipy functions: rounding only


@dataclass(frozen=True)
class Setting:
    """What a cert_id names. `sigma` None: each model's training σ; `n0` None: imported (the
    log does not say); `ddrs_min_sigma`: data-dependent σ_x per point, at least this."""

    n: int
    alpha: float
    sigma: float | None
    n0: int | None = None
    skip: int = 1
    max_points: float = np.inf
    ddrs_min_sigma: float | None = None
    start: int = 0  # a final step's range (`final_points`): [start, stop)
    stop: float = np.inf

    @property
    def imported(self) -> bool:
        return self.n0 is None


def setting_of(cert_id: str) -> Setting | None:
    """The setting `cert_id` names, or None if it names none (not a spelling the driver or
    the importer writes, or values no setting takes: n < 1, α outside (0, 1), σ ≤ 0, ...). A
    final step's (`final_points.final_of`): its selection's setting on the report points."""
    if (final := final_of(cert_id)) is not None:
        selection, points = setting_of(final[0]), final[1]
        if selection is None or selection.ddrs_min_sigma is not None:
            return None
        top = np.inf if points.max_points is None else points.max_points
        stop = np.inf if points.stop is None else points.stop
        return replace(selection, skip=points.skip, max_points=top, start=points.start, stop=stop)
    if m := IMPORTED.fullmatch(cert_id):
        setting = Setting(int(m["n"]), _number(m["alpha"]), _number(m["sigma"]))
        spelled = f"imported-sigma-{setting.sigma:g}-n-{setting.n}-alpha-{setting.alpha:g}"
    elif m := OWN.fullmatch(cert_id):
        sigma = None if m["sigma"] == "train" else _number(m["sigma"])
        top = np.inf if m["max"] == "all" else int(m["max"])
        lowest = None if m["K"] is None else _number(m["min"])
        setting = Setting(
            int(m["n"]), _number(m["alpha"]), sigma, int(m["n0"]), int(m["skip"]), top, lowest
        )
        spelled = _own_spelling(setting, m)
    else:
        return None
    return setting if spelled == cert_id and _sane(setting) else None


def most_points(cert_id: str, dataset: str | None) -> int:
    """The most test points (rows) a model certified under `cert_id` has: every skip-th
    point of `dataset`'s test split, at most max (an imported setting: the whole split). A
    data set not known, or a cert_id naming no setting: the largest split, every point."""
    size = STANDARD_TEST_SIZE.get(dataset or "", max(STANDARD_TEST_SIZE.values()))
    setting = setting_of(cert_id)
    if setting is None or setting.imported:
        return size
    span = max(0, int(min(size, setting.stop)) - setting.start)
    return int(min(-(-span // setting.skip), setting.max_points))


def _own_spelling(s: Setting, m: re.Match) -> str:
    """The cert_id `CertifySpec.cert_id` writes for what `m` parsed (numbers re-printed)."""
    sigma = "train" if s.sigma is None else f"{s.sigma:g}"
    top = "all" if s.max_points == np.inf else int(s.max_points)
    text = f"sigma-{sigma}_n0-{s.n0}_n-{s.n}_alpha-{s.alpha:g}_skip-{s.skip}_max-{top}{m['tags']}"
    text += m["env"] or ""  # the envelope strategy (issue 28): rows may be not estimated
    if m["K"] is None:
        return text
    ddrs = f"K{int(m['K'])}-lr{_number(m['lr']):g}-n{int(m['samples'])}-min{s.ddrs_min_sigma:g}"
    return f"{text}_ddrs-{ddrs}"


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _sane(s: Setting) -> bool:
    positive = [s.sigma if s.sigma is not None else 1.0, s.ddrs_min_sigma or 1.0]
    counts = [s.n, s.n0 or 1, s.skip, s.max_points]
    return 0 < s.alpha < 1 and all(np.isfinite(v) and v > 0 for v in positive) and min(counts) >= 1


# ------------------------------------------------------------------------------ the rows
Check = tuple[np.ndarray, str]


def certified_checks(
    exp: Experiment,
    table: pa.Table,
    files: list[StageFile],
    frag: np.ndarray,
    metadata: list[dict | None] | None = None,
) -> list[Check]:
    """[(bad-row mask, what is wrong)] of certification rows against their setting, their
    trial and their own counts (the module docstring); `frag` is each row's file in `files`,
    whose path names its trial and setting, `metadata` each file's (for import records)."""
    configs, no_trial = trial_configs(exp, files, metadata or [None] * len(files))
    settings = [setting_of(f.setting_id) for f in files]
    unknown = {i: "its cert_id names no certification setting" for i, s in enumerate(settings)}
    sweep = declared(exp)
    undeclared = {
        i: why for i, f in enumerate(files) if (why := sweep.setting_problem(f.setting_id))
    }
    checks = [
        *_file_checks(frag, no_trial),
        *_file_checks(frag, {i: why for i, why in unknown.items() if settings[i] is None}),
        *_file_checks(frag, undeclared),
    ]
    trial_sigma = [getattr(configs.get(f.trial_id), "sigma", np.nan) for f in files]
    per = _per_row([s or Setting(1, 0.5, 1.0) for s in settings], trial_sigma, frag)
    return [
        *checks,
        *_identity_checks(table, [configs.get(f.trial_id) for f in files], frag),
        *_point_checks(table, per),
        *_gap_checks(table, files, frag, per),
        *_setting_checks(table, per),
        *_certificate_checks(table, per["imported"]),
        *_memory_checks(table),
    ]


def _file_checks(frag: np.ndarray, problems: dict[int, str]) -> list[Check]:
    """{file index: what is wrong with it} as checks of every row of those files."""
    return [
        (np.isin(frag, [i for i, p in problems.items() if p == what]), what)
        for what in sorted(set(problems.values()))
    ]


def _per_row(settings: list[Setting], trial_sigma: list[float], frag: np.ndarray) -> dict:
    """Each row's setting as arrays (from its file's): n, n0, α, σ (the trial's for
    `sigma-train`), skip, max, DDRS min σ (NaN: fixed σ), imported."""

    def column(values: list) -> np.ndarray:
        return np.asarray(values)[frag] if len(frag) else np.asarray(values)[:0]

    return {
        "n": column([s.n for s in settings]),
        "n0": column([s.n0 or 0 for s in settings]),
        "alpha": column([s.alpha for s in settings]),
        "sigma": column(
            [t if s.sigma is None else s.sigma for s, t in zip(settings, trial_sigma, strict=True)]
        ),
        "skip": column([s.skip for s in settings]),
        "max": column([s.max_points for s in settings]),
        "start": column([s.start for s in settings]),
        "stop": column([s.stop for s in settings]),
        "ddrs": column(
            [np.nan if s.ddrs_min_sigma is None else s.ddrs_min_sigma for s in settings]
        ),
        "imported": column([s.imported for s in settings]).astype(bool),
    }


def _ints(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).fill_null(-2).to_numpy(zero_copy_only=False).astype(np.int64)


def _floats(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False).astype(float)  # null: NaN


def _point_checks(table: pa.Table, per: dict) -> list[Check]:
    """Test points inside the data set's test split and on the grid the cert_id names."""
    idx = _ints(table, "idx")
    names = list(STANDARD_TEST_SIZE)
    where = pc.index_in(table.column("dataset"), value_set=pa.array(names)).fill_null(-1)
    size = np.array([*STANDARD_TEST_SIZE.values(), 0])[where.to_numpy(zero_copy_only=False)]
    skip, start = np.maximum(per["skip"], 1), per["start"]
    step = (idx - start) % skip != 0
    outside = (idx < start) | (idx >= per["stop"]) | ((idx - start) // skip >= per["max"])
    off = ~per["imported"] & (step | outside)
    return [
        (idx >= size, "a test point outside the data set's test split"),
        (off, "a test point off the grid its cert_id names (every skip-th, at most max)"),
    ]


def _gap_checks(
    table: pa.Table, files: list[StageFile], frag: np.ndarray, per: dict
) -> list[Check]:
    """A finished model (its compacted file, or all K of its shards) holds the first points of
    its grid without a gap: every skip-th point from 0 up to its last (with the checks above,
    as many rows as that). An unfinished model is named as missing shards instead; an imported
    one names no grid."""
    seen: dict[tuple[str, str], set[int | None]] = {}
    for f in files:
        seen.setdefault(f.model, set()).add(f.index)
    finished = [f.kind == "compacted" or seen[f.model] == set(range(f.count or 0)) for f in files]
    models = {m: k for k, m in enumerate(seen)}
    model = np.array([models[f.model] for f in files] + [0])[frag]
    last = np.full(len(models), -1)
    np.maximum.at(last, model, (_ints(table, "idx") - per["start"]) // np.maximum(per["skip"], 1))
    gap = np.bincount(model, minlength=len(models)) < last + 1
    bad = gap[model] & np.array([*finished, False])[frag] & ~per["imported"]
    return [(bad, "a finished model with a gap in its grid (points missing before its last)")]


def _setting_checks(table: pa.Table, per: dict) -> list[Check]:
    """n, n0, α, σ_cert and the smoothing of each row: the ones its cert_id names."""
    sigma = _floats(table, "sigma_cert")
    ddrs = ~np.isnan(per["ddrs"])
    smoothing = pc.fill_null(table.column("smoothing"), "fixed").to_numpy(zero_copy_only=False)
    return [
        (_ints(table, "n") != per["n"], "n is not the one its cert_id names"),
        (
            ~per["imported"] & (_ints(table, "n0") != per["n0"]),
            "n0 is not the one its cert_id names",
        ),
        (_ints(table, "n0") < 1, "n0 is not a sample count"),
        (
            ~np.isclose(_floats(table, "alpha"), per["alpha"], rtol=ALPHA_RTOL, atol=0),
            "alpha is not the one its cert_id names",
        ),
        (
            ~ddrs & ~np.isclose(sigma, per["sigma"], rtol=ALPHA_RTOL, atol=0),
            "sigma_cert is not the one its cert_id names",
        ),
        (
            ddrs & ~(sigma >= per["ddrs"]),
            "sigma_cert below the least sigma its DDRS setting allows",
        ),
        (ddrs != (smoothing == "data-dependent"), "smoothing is not the one its cert_id names"),
    ]


def _certificate_checks(table: pa.Table, imported: np.ndarray) -> list[Check]:
    """p_lower, the abstention and the (Monte-Carlo) radius recomputed from count, n, α, σ
    (the kernel's `lower_confidence_bound` and `radius_of_bound`, as CERTIFY computed them)."""
    has = table.column("count").is_valid().to_numpy(zero_copy_only=False)
    count, n, alpha = _ints(table, "count"), _ints(table, "n"), _floats(table, "alpha")
    possible = has & (count >= 0) & (count <= n) & (n >= 1)
    p = np.where(possible, lower_bounds(count, n, alpha), np.nan)
    predict, radius = _monte_carlo(table)
    abstain = p < 0.5
    expected = radius_of_bound(p, _floats(table, "sigma_cert"))
    stored = _floats(table, "p_lower")
    return [
        (~has & ~imported & ~not_estimated(table), "no count to recompute its certificate from"),
        (has & ~possible, "a count outside 0..n"),
        (
            possible & ~np.isclose(stored, p, rtol=P_RTOL, atol=1e-12),
            "a p_lower its count, n and alpha do not give",
        ),
        (
            possible & (abstain != (predict == -1)),
            "a prediction its p_lower does not give (abstain exactly when p_lower < 1/2)",
        ),
        (
            possible & ~np.isclose(radius, expected, rtol=P_RTOL, atol=RADIUS_ATOL),
            "a radius its p_lower and sigma_cert do not give",
        ),
    ]


def not_estimated(table: pa.Table) -> np.ndarray:
    """Rows the `envelope` strategy recorded as not estimated (no estimation draws: the point
    could not count at a radius the model could win at): only under an `_envelope` cert_id,
    with no count, p_lower or radius, an abstention and not correct. They count as not
    certified at every radius."""
    envelope = pc.match_substring(table.column("cert_id"), ENVELOPE_MARK).to_numpy(
        zero_copy_only=False
    )
    empty = [table.column(c).is_null().to_numpy(zero_copy_only=False) for c in NOT_ESTIMATED]
    predict = _ints(table, "predict")
    correct = table.column("correct").fill_null(True).to_numpy(zero_copy_only=False)
    return envelope & np.logical_and.reduce(empty) & (predict == -1) & ~correct


NOT_ESTIMATED = ("count", "p_lower", "radius")  # null in a row not estimated


def lower_bounds(count: np.ndarray, n: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """The one-sided (1 − α) Clopper–Pearson lower bound per row, 0 where count = 0: the
    kernel's `lower_confidence_bound`, called once per distinct count of each distinct (n, α):
    a sweep has few settings, and sorting one integer column is far faster than sorting rows
    of three."""
    bound = np.zeros(len(count))
    pairs, pair = np.unique(n.astype(float) + 1j * alpha.astype(float), return_inverse=True)
    for code, setting in enumerate(pairs):
        rows = pair.reshape(-1) == code
        k, where = np.unique(count[rows], return_inverse=True)
        total, level = setting.real, setting.imag
        with np.errstate(invalid="ignore"):
            p = np.asarray(lower_confidence_bound(k, total, level), dtype=np.float64)
        bound[rows] = p[where.reshape(-1)]
    return bound


def _monte_carlo(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(predict, radius) as CERTIFY gave them: the *_raw ones where the memory pass ran."""
    predict = pc.coalesce(table.column("predict_raw"), table.column("predict"))
    radius = pc.coalesce(table.column("radius_raw"), table.column("radius"))
    return (
        predict.fill_null(-2).to_numpy(zero_copy_only=False).astype(np.int64),
        radius.to_numpy(zero_copy_only=False).astype(float),
    )


def _memory_checks(table: pa.Table) -> list[Check]:
    """What the DDRS memory pass (`trainables.ddrs.memory_certify`, either reading of
    abstentions) may do: change a certificate only where memory_changed says so, shrink a
    ball of the class CERTIFY gave (never grow it), and give a point another class (an
    abstained one too: the authors' rule) with a ball the rows cannot check (it lies inside
    another point's ball)."""
    changed = table.column("memory_changed")
    ran = changed.is_valid().to_numpy(zero_copy_only=False)
    unchanged = ran & ~changed.fill_null(True).to_numpy(zero_copy_only=False)
    predict, radius = _ints(table, "predict"), _floats(table, "radius")
    raw_predict, raw_radius = _monte_carlo(table)
    same_class = ran & (predict == raw_predict) & (predict != -1)
    return [
        (
            unchanged & ((predict != raw_predict) | (radius != raw_radius)),
            "memory_changed is false but the certificate is not CERTIFY's",
        ),
        (same_class & (radius > raw_radius), "the memory pass made a ball larger"),
    ]


def _identity_checks(table: pa.Table, configs: list, frag: np.ndarray) -> list[Check]:
    """Rows whose hyperparameter columns are not their trial's (files without a trial are
    named for that already)."""
    from trainables.kernel.config import ADDED_FIELDS, ENVIRONMENT_FIELDS, TrialConfig

    known = np.array([c is not None for c in configs] + [False])[frag]
    names = [
        n
        for n in TrialConfig.__dataclass_fields__
        if n not in ENVIRONMENT_FIELDS and n in table.column_names
    ]
    dicts = [None if c is None else c.to_dict() for c in configs]  # once per file, not column
    checks = []
    for name in names:
        column = table.column(name)
        values = [None if d is None else d[name] for d in dicts]
        expected = pa.array(values, column.type).take(pa.array(frag))
        # a setting added since a file was written is null there (`file_checks.LEGACY_OPTIONAL`)
        unwritten = column.is_null() if name in ADDED_FIELDS else expected.is_null()
        both_null = pc.and_(column.is_null(), unwritten)
        differs = pc.fill_null(pc.not_equal(column, expected), True)
        bad = pc.and_(differs, pc.invert(both_null)).to_numpy(zero_copy_only=False)
        checks.append((known & bad, f"{name} is not its trial's"))
    return checks
