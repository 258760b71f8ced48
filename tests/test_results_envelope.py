"""Parquet shards -> results table -> certified accuracy, upper envelope, reports (no Ray)."""

from __future__ import annotations

import io
import json

import certified_rows
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import beta, norm
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.report.render import plot_envelope, render, to_markdown
from sweeper.results.certify_rows import SCHEMA, ResultsError, load_results, shard_table
from sweeper.results.envelope import (
    READ_COLUMNS,
    EnvelopeError,
    _LastFrame,
    certified_accuracy,
    envelope,
    envelope_curve,
    max_radii,
    model_table,
    parse_radii,
    read_columns,
)
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from trainables.kernel.config import TrialConfig
from trainables.kernel.ddrs_settings import DDRSSettings

# Certified at a fixed σ_cert = 1 (`--sigma-cert 1`): the radii below (up to 2.0) are ones
# CERTIFY can give (at most 3.81·σ at n = 10^5), which the trials' own σ could not.
SIGMA_CERT = 1.0
CERT = CertifySpec(sigma=SIGMA_CERT, n0=10, n=100_000, alpha=0.001, skip=1, max_points=None)
CID = CERT.cert_id
RADII = [0.0, 0.5, 1.0, 1.5, 2.0, 2.25]
# The fewest votes among n = 10^5 whose radius at σ = 1 reaches 0.1, 0.5, ... (its radius is
# then less than 10^-4 beyond: test_the_votes_just_reach_their_radii); 40,000 abstain.
VOTES = {0.1: 54_471, 0.3: 62_267, 0.5: 69_598, 0.7: 76_222, 1.0: 84_492, 2.0: 97_870}
ABSTAIN = 40_000


def radius_of(votes: int) -> float:
    """CERTIFY's radius for `votes` of CERT's n at σ = 1, written out with scipy: Φ⁻¹ of the
    one-sided Clopper–Pearson lower bound beta.ppf(α, k, n − k + 1), 0 below 1/2."""
    p = beta.ppf(CERT.alpha, votes, CERT.n - votes + 1)
    return SIGMA_CERT * norm.ppf(p) if p >= 0.5 else 0.0


def _configs() -> tuple[TrialConfig, TrialConfig]:
    """Two digits models, ordered so that the first has the LARGER trial_id: the model with
    the higher clean accuracy then cannot win a tie by trial_id alone."""
    a = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=1)
    b = TrialConfig(
        dataset="digits",
        method="smoothadv",
        sigma=0.5,
        attack="pgd",
        epsilon=0.5,
        steps=2,
        m_train=2,
        epochs=1,
    )
    return (a, b) if a.trial_id > b.trial_id else (b, a)


HI, LO = _configs()
# Per point: is the class its n0 draws selected the label, and its votes among n.
# HI: 4 points, 3 correct (radii just past 0.1, 0.5, 1.0) and one abstention. clean 0.75,
# ACR just over 0.4 (HI_ACR).
HI_POINTS = {
    "correct": [True, True, True, False],
    "votes": [VOTES[0.1], VOTES[0.5], VOTES[1.0], ABSTAIN],
}
# LO: 4 points; correct with radii just past 2.0 and 0.3, one WRONG with radius just past 0.7,
# one abstention.
LO_POINTS = {
    "correct": [True, True, False, False],
    "votes": [VOTES[2.0], VOTES[0.3], VOTES[0.7], ABSTAIN],
}
HI_CURVE = [0.75, 0.5, 0.25, 0.0, 0.0, 0.0]
LO_CURVE = [0.5, 0.25, 0.25, 0.25, 0.25, 0.0]
HI_ACR = (radius_of(VOTES[0.1]) + radius_of(VOTES[0.5]) + radius_of(VOTES[1.0])) / 4
LO_ACR = (radius_of(VOTES[2.0]) + radius_of(VOTES[0.3])) / 4  # the wrong 0.7 is not counted


def columns(points: dict, idx: list[int], spec: CertifySpec = CERT) -> dict[str, list]:
    """CERTIFY's columns (its arithmetic on the votes) for digits' test points `idx`: the
    n0 draws selected the label where `correct`, else the next class."""
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in idx]
    selected = [y if c else (y + 1) % 10 for y, c in zip(labels, points["correct"], strict=True)]
    return certified_rows.columns(spec, SIGMA_CERT, idx, points["votes"], labels, selected)


def table(cfg: TrialConfig, points: dict, idx: list[int], experiment: str = "exp") -> pa.Table:
    constants = {"smoothing": "fixed", "n0": CERT.n0, "n": CERT.n, "alpha": CERT.alpha}
    metadata = {
        "certify_backend": "test-backend 1.0",
        "normalization": "NormalizeLayer(means=[0.5], sds=[0.5])",
        "config": cfg.to_dict(),
    }
    return shard_table(cfg, experiment, CID, constants, columns(points, idx), metadata)


def _part(points: dict, sl: slice) -> dict:
    return {k: v[sl] for k, v in points.items()}


def write_experiment(storage, name: str = "exp") -> Experiment:
    """HI: complete, 2 shards of 2 points; LO: shards 0 and 2 of 3 (shard 1 missing); both
    trained (their trial.json)."""
    exp = Experiment(str(storage), name)
    certified_rows.trained(exp, HI)
    certified_rows.trained(exp, LO)
    write_table(
        table(HI, _part(HI_POINTS, slice(0, 2)), [0, 1], name),
        exp.shard_path(HI.trial_id, CID, 0, 2),
    )
    write_table(
        table(HI, _part(HI_POINTS, slice(2, 4)), [2, 3], name),
        exp.shard_path(HI.trial_id, CID, 1, 2),
    )
    write_table(
        table(LO, _part(LO_POINTS, slice(0, 2)), [0, 1], name),
        exp.shard_path(LO.trial_id, CID, 0, 3),
    )
    write_table(
        table(LO, _part(LO_POINTS, slice(2, 4)), [4, 5], name),
        exp.shard_path(LO.trial_id, CID, 2, 3),
    )
    return exp


def frame_of(*tables: pa.Table) -> pd.DataFrame:
    return pa.concat_tables(tables).to_pandas()


@pytest.fixture
def frame() -> pd.DataFrame:
    return frame_of(table(HI, HI_POINTS, [0, 1, 2, 3]), table(LO, LO_POINTS, [0, 1, 2, 3]))


# ------------------------------------------------------------------------------ results
def test_shard_table_repeats_identity_and_constants():
    t = table(LO, LO_POINTS, [0, 1, 2, 3])
    assert t.schema.remove_metadata().equals(SCHEMA)
    d = t.to_pydict()
    assert d["trial_id"] == [LO.trial_id] * 4
    assert d["cert_id"] == [CID] * 4
    assert d["experiment"] == ["exp"] * 4
    assert d["sigma"] == [LO.sigma] * 4
    assert d["n"] == [100_000] * 4
    assert d["attack"] == [LO.attack] * 4
    g = table(HI, HI_POINTS, [0, 1, 2, 3]).to_pydict()
    gauss = g if HI.method == "gaussian" else d
    assert gauss["epsilon"] == [None] * 4 and gauss["attack"] == [None] * 4  # null columns
    assert "data_dir" not in d and "num_workers" not in d  # environment is not identity


def test_the_votes_just_reach_their_radii(frame):
    """Each of VOTES is the fewest votes whose radius (scipy's, written out) reaches the radius
    it is named for, and passes it by less than 10^-4: the curves above, by hand, count each
    point at those radii. ABSTAIN's bound is below 1/2. The rows carry these radii, and
    predict the label exactly where `correct` says."""
    for reach, votes in VOTES.items():
        assert radius_of(votes - 1) < reach <= radius_of(votes) < reach + 1e-4
    assert beta.ppf(CERT.alpha, ABSTAIN, CERT.n - ABSTAIN + 1) < 0.5
    for cfg, points in ((HI, HI_POINTS), (LO, LO_POINTS)):
        rows = frame[frame["trial_id"] == cfg.trial_id]
        expected = [radius_of(v) for v in points["votes"]]
        np.testing.assert_allclose(rows["radius"], expected, rtol=1e-12, atol=0)
        assert (rows["predict"] == -1).tolist() == [v == ABSTAIN for v in points["votes"]]
        assert rows["correct"].tolist() == points["correct"]
        assert (rows["sigma_cert"] == SIGMA_CERT).all() and (rows["n"] == CERT.n).all()


def test_load_results_reads_every_shard(tmp_path):
    exp = write_experiment(tmp_path)
    results = load_results(exp)
    assert len(results.files) == 4
    assert all(f.startswith(exp.certify_dir) for f in results.files)
    frame = results.frame
    assert len(frame) == 8
    assert list(frame.columns) == [*SCHEMA.names, "sound"]  # see Results
    assert frame["sound"].all() and (frame["radius_raw"] == frame["radius"]).all()
    assert results.models == 2
    assert sorted(frame.groupby("trial_id").size().items()) == sorted(
        [(HI.trial_id, 4), (LO.trial_id, 4)]
    )
    assert set(frame.loc[frame.trial_id == LO.trial_id, "idx"]) == {0, 1, 4, 5}
    assert frame["radius"].dtype == np.float64 and frame["correct"].dtype == bool
    assert results.missing_shards == {(LO.trial_id, CID): [1]}
    for f in results.files:
        schema = pq.read_schema(f)
        assert schema.remove_metadata().equals(SCHEMA)
        meta = schema.metadata
        for key in (b"sweeper.certify_backend", b"sweeper.normalization", b"sweeper.config"):
            assert key in meta, key
        cfg = TrialConfig.from_dict(json.loads(meta[b"sweeper.config"]))
        assert cfg.trial_id in (HI.trial_id, LO.trial_id)
        assert f"/{cfg.trial_id}/" in f
    assert not list(tmp_path.rglob("*.tmp")), "atomic write left a temp file"


def test_empty_experiment_has_no_rows(tmp_path):
    exp = Experiment(str(tmp_path), "exp")
    (tmp_path / "exp").mkdir()
    results = load_results(exp)
    assert results.frame.empty and results.files == [] and results.models == 0
    assert list(results.frame.columns)[: len(SCHEMA.names)] == SCHEMA.names


def test_corrupt_parquet_is_named_and_left_out(tmp_path):
    exp = write_experiment(tmp_path)
    bad = exp.shard_path(LO.trial_id, CID, 1, 3)
    with open(bad, "wb") as f:
        f.write(b"this is not parquet at all" * 10)
    results = load_results(exp)
    assert len(results.frame) == 8 and bad not in results.files
    assert [p.split(": ")[0] for p in results.invalid] == [bad]
    assert "not a readable Parquet file" in results.invalid[0] and "\n" not in results.invalid[0]
    with open(bad, "rb") as f:  # nothing deleted
        assert f.read().startswith(b"this is not parquet")


def test_temp_and_foreign_files_are_ignored(tmp_path):
    exp = write_experiment(tmp_path)
    d = tmp_path / "exp" / "certify" / HI.trial_id / CID
    (d / ".shard-00005-of-00009.parquet.abc.tmp").write_bytes(b"partial")
    (d / "notes.parquet").write_bytes(b"not a shard")
    assert len(load_results(exp).frame) == 8


def test_nonexistent_experiment(tmp_path):
    with pytest.raises(ResultsError, match="no experiment at"):
        load_results(Experiment(str(tmp_path), "nope"))


# ------------------------------------------------------------------------------ envelope math
def test_read_columns_adds_the_results_columns_asked_for_once_and_nothing_else():
    """`sweeper envelope --by lam2` reads that column too; a column already read (sigma, idx:
    the winner and runner-up are compared point by point), None, an empty name and a name that
    is no results column (left for `envelope` to refuse) add nothing."""
    assert "idx" in READ_COLUMNS and "count" in SCHEMA.names and "count" not in READ_COLUMNS
    assert read_columns() == READ_COLUMNS
    asked = read_columns("count", "sigma", None, "", "no_such_column", "idx", "count")
    assert asked == [*READ_COLUMNS, "count"]


def test_the_last_frame_cache_computes_once_per_frame_and_anew_for_another():
    """A fresh cache computes on first use; the same frame (same length) reuses each value,
    another frame or one whose length changed computes anew."""
    cache, calls = _LastFrame(), []

    def compute(frame: pd.DataFrame) -> int:
        calls.append(len(frame))
        return len(frame) * 10

    one, two = pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"a": [1, 2]})
    assert [cache.get(one, "x", compute), cache.get(one, "x", compute)] == [20, 20]
    assert calls == [2]
    assert cache.get(two, "x", compute) == 20 and calls == [2, 2]
    two.loc[2] = [3]
    assert cache.get(two, "x", compute) == 30 and calls == [2, 2, 3]


def test_certified_accuracy_by_hand(frame):
    acc = certified_accuracy(frame, RADII)
    models = model_table(frame)
    rows = {tid: i for i, tid in enumerate(models["trial_id"])}
    assert acc.loc[rows[HI.trial_id]].tolist() == HI_CURVE
    assert acc.loc[rows[LO.trial_id]].tolist() == LO_CURVE


def test_model_table_by_hand(frame):
    m = model_table(frame).set_index("trial_id")
    assert m.loc[HI.trial_id, "points"] == 4
    assert m.loc[HI.trial_id, "clean_acc"] == pytest.approx(0.75)
    assert m.loc[HI.trial_id, "acr"] == pytest.approx(HI_ACR, rel=1e-12)
    assert m.loc[HI.trial_id, "abstain_rate"] == pytest.approx(0.25)
    assert m.loc[LO.trial_id, "clean_acc"] == pytest.approx(0.5)
    assert m.loc[LO.trial_id, "acr"] == pytest.approx(LO_ACR, rel=1e-12)  # the wrong 0.7 is not
    assert m.loc[LO.trial_id, "abstain_rate"] == pytest.approx(0.25)
    assert m.loc[LO.trial_id, "sigma"] == LO.sigma
    assert m.loc[LO.trial_id, "method"] == LO.method
    assert m.loc[HI.trial_id, "cert_id"] == CID


def test_envelope_by_hand(frame):
    env = envelope(frame, RADII)
    assert env["radius"].tolist() == RADII
    assert env["certified_accuracy"].tolist() == [0.75, 0.5, 0.25, 0.25, 0.25, 0.0]
    # r=1.0: both 0.25, HI has the higher clean accuracy (and the larger trial_id);
    # r=2.25: everybody 0, clean accuracy decides again.
    winners = [HI, HI, HI, LO, LO, HI]
    assert env["trial_id"].tolist() == [w.trial_id for w in winners]
    assert env["clean_acc"].tolist() == [0.75, 0.75, 0.75, 0.5, 0.5, 0.75]
    assert env["sigma"].tolist() == [w.sigma for w in winners]
    assert env["method"].tolist() == [w.method for w in winners]
    assert (env["models"] == 2).all()
    assert (env["points"] == 4).all()
    assert env.loc[3, "acr"] == pytest.approx(LO_ACR, rel=1e-12)
    assert (env["cert_id"] == CID).all()


# CERTIFY's largest radius per unit σ: Φ⁻¹ of the Clopper–Pearson lower bound of n votes out
# of n, written out (checked against scipy below, not against the code under test).
REACH_1000 = 2.604935141811568  # n = 1000, α = 0.01
REACH_100000 = 3.8114565633899145  # n = 100000, α = 0.001: the 3.81·σ above


def test_the_written_out_reaches_are_scipys_clopper_pearson_bounds():
    for reach, n, alpha in ((REACH_1000, 1000, 0.01), (REACH_100000, 100_000, 0.001)):
        assert norm.ppf(beta.ppf(alpha, n, 1)) == pytest.approx(reach, rel=1e-12)


@pytest.fixture
def ddrs_frame(frame) -> pd.DataFrame:
    """HI with per-point σ (largest 0.5); LO certified with n = 1000, α = 0.01 at σ = 1."""
    frame = frame.copy()
    hi = (frame["trial_id"] == HI.trial_id).to_numpy()
    frame.loc[hi, "sigma_cert"] = [0.25, 0.5, 0.4, 0.25]
    frame.loc[~hi, "n"], frame.loc[~hi, "alpha"] = 1000, 0.01
    return frame


def test_max_radii_are_each_models_largest_possible_radius(ddrs_frame):
    """Model order (by trial_id: LO first); a model's largest σ sets its bound; without the
    certification settings there is no bound (inf)."""
    expected = [1.0 * REACH_1000, 0.5 * REACH_100000]  # LO: σ = 1; HI: its largest σ, 0.5
    np.testing.assert_allclose(max_radii(ddrs_frame), expected, rtol=1e-12)
    assert max_radii(ddrs_frame).dtype == np.float64
    for setting in ("sigma_cert", "n", "alpha"):
        assert np.isinf(max_radii(ddrs_frame.drop(columns=[setting]))).all()


def test_envelope_rows_carry_the_largest_radius_their_group_can_certify(ddrs_frame):
    """All models together: LO's 2.605 (σ = 1) beats HI's 1.906 (0.5·3.811); by the trials'
    σ, each group has its one model's."""
    reach = {LO.trial_id: 1.0 * REACH_1000, HI.trial_id: 0.5 * REACH_100000}
    env = envelope(ddrs_frame, RADII)
    np.testing.assert_allclose(env["max_radius"], [REACH_1000] * len(RADII), rtol=1e-12)
    by_sigma = envelope(ddrs_frame, [0.5], by="sigma")
    expected = [reach[cfg.trial_id] for cfg in sorted((HI, LO), key=lambda c: c.sigma)]
    np.testing.assert_allclose(by_sigma["max_radius"], expected, rtol=1e-12)


def test_envelope_tie_with_equal_clean_accuracy_goes_to_smaller_trial_id():
    twin = HI.replace(seed=1)  # same outcomes, another trial
    frame = frame_of(table(HI, HI_POINTS, [0, 1, 2, 3]), table(twin, HI_POINTS, [0, 1, 2, 3]))
    env = envelope(frame, RADII)
    smaller = min(HI.trial_id, twin.trial_id)
    assert (env["trial_id"] == smaller).all()
    assert env["certified_accuracy"].tolist() == HI_CURVE


def _two_settings_each(rows_per_model: int = 3) -> pd.DataFrame:
    """Trials t1, t2, each certified under cert ids c1 and c2 with identical results, the rows
    in an order that sorts neither by trial_id nor by cert_id."""
    rows = [
        {
            "trial_id": t,
            "cert_id": c,
            "idx": i,
            "correct": i != 1,
            "radius": 0.5 * i,
            "predict": 0 if i != 1 else -1,
            "sigma": 0.25,
            "method": "gaussian",
        }
        for c, t in (("c2", "t2"), ("c1", "t2"), ("c2", "t1"), ("c1", "t1"))
        for i in range(rows_per_model)
    ]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)


def test_models_are_listed_by_trial_id_then_cert_id_with_their_own_columns_only():
    frame = _two_settings_each()
    table = model_table(frame)
    assert list(zip(table["trial_id"], table["cert_id"], strict=True)) == [
        ("t1", "c1"),
        ("t1", "c2"),
        ("t2", "c1"),
        ("t2", "c2"),
    ]
    assert list(table.columns[:6]) == [
        "trial_id",
        "cert_id",
        "points",
        "clean_acc",
        "acr",
        "abstain_rate",
    ]
    assert set(table.columns) - set(frame.columns) == {"points", "clean_acc", "acr", "abstain_rate"}
    assert table["points"].tolist() == [3] * 4
    assert certified_accuracy(frame, [0.0, 1.0]).values.tolist() == [[2 / 3, 1 / 3]] * 4


def test_envelope_tie_between_settings_of_one_trial_goes_to_the_smaller_cert_id():
    env = envelope(_two_settings_each(), [0.0, 0.5, 1.0])
    assert env["trial_id"].tolist() == ["t1"] * 3 and env["cert_id"].tolist() == ["c1"] * 3


def test_envelope_by_group(frame):
    env = envelope(frame, RADII, by="sigma")
    assert len(env) == 2 * len(RADII)
    assert (env["models"] == 1).all()
    for cfg, curve in ((HI, HI_CURVE), (LO, LO_CURVE)):
        part = env[env["sigma"] == cfg.sigma]
        assert part["certified_accuracy"].tolist() == curve
        assert (part["trial_id"] == cfg.trial_id).all()
    by_method = envelope(frame, [0.0], by="method")
    assert set(by_method["method"]) == {"gaussian", "smoothadv"}
    # attack is null for the Gaussian model: it still forms a group
    by_attack = envelope(frame, [0.0], by="attack")
    assert len(by_attack) == 2


def test_envelope_errors(frame):
    with pytest.raises(EnvelopeError, match="no certification results"):
        envelope(frame.iloc[0:0], RADII)
    with pytest.raises(EnvelopeError, match="--by 'colour'"):
        envelope(frame, RADII, by="colour")


def random_frame(seed: int, models: int = 7, points: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = TrialConfig(dataset="digits", method="gaussian", m_train=1, epochs=1)
    tables = []
    for k in range(models):
        cfg = base.replace(seed=k, sigma=float(rng.choice([0.25, 0.5, 1.0])))
        abstain = rng.random(points) < 0.2
        correct = (rng.random(points) < 0.7) & ~abstain
        # votes giving radii of about exponential(0.6) at σ = 1, in hundreds (radii repeat
        # across models); fewer than half of n abstain
        reach = np.round(rng.exponential(0.6, points), 2)
        votes = np.minimum(np.round(CERT.n * norm.cdf(reach), -2), CERT.n).astype(int)
        votes = np.where(abstain, rng.integers(0, CERT.n // 2, points), votes)
        pts = {"correct": correct.tolist(), "votes": votes.tolist()}
        tables.append(table(cfg, pts, list(range(points))))
    return frame_of(*tables)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_envelope_is_the_max_of_the_curves_on_random_data(seed):
    frame = random_frame(seed)
    radii = parse_radii("0:3:0.1")
    env = envelope(frame, radii)
    acc = env["certified_accuracy"].to_numpy()
    assert np.all(np.diff(acc) <= 0), "the envelope must be non-increasing"
    # naive per-model curves
    naive = {}
    for tid, part in frame.groupby("trial_id"):
        naive[tid] = [np.mean(part["correct"] & (part["radius"] >= r)) for r in radii]
    best = np.max(np.array(list(naive.values())), axis=0)
    np.testing.assert_allclose(acc, best)
    np.testing.assert_allclose(envelope_curve(frame, np.array(radii)), best)
    clean = {tid: part["correct"].mean() for tid, part in frame.groupby("trial_id")}
    for i, row in env.iterrows():
        tid = row["trial_id"]
        assert naive[tid][i] == pytest.approx(acc[i])  # the winner achieves it
        tied = [t for t in naive if naive[t][i] == pytest.approx(acc[i])]
        top = max(clean[t] for t in tied)
        assert clean[tid] == pytest.approx(top)
        assert tid == min(t for t in tied if clean[t] == pytest.approx(top))
    grouped = envelope(frame, radii, by="sigma")
    for _, part in grouped.groupby("sigma"):
        assert np.all(part["certified_accuracy"].to_numpy() <= acc + 1e-12)
    per_r = grouped.groupby("radius")["certified_accuracy"].max().to_numpy()
    np.testing.assert_allclose(per_r, acc)


# ------------------------------------------------------------------------------ radii
def test_parse_radii():
    r = parse_radii("0:2.25:0.25")
    assert len(r) == 10
    assert r[0] == 0.0 and r[-1] == 2.25
    np.testing.assert_allclose(np.diff(r), 0.25)
    assert parse_radii("0,0.5") == [0.0, 0.5]
    assert parse_radii("0.5") == [0.5]
    assert parse_radii("0:1:0.3") == [0.0, 0.3, 0.6, 0.9]
    assert parse_radii("0.1:0.3:0.1") == [0.1, 0.2, 0.3]  # float steps keep the stop
    assert parse_radii("0.5:0.5:0.25") == [0.5]  # start = stop: that one radius
    # A range's radii are rounded to 10 decimals (far below any radius that matters; the
    # float steps' noise, 0.1 + 2 * 0.1 = 0.30000000000000004, goes)
    assert parse_radii("0.12345678904:0.2:1") == [0.123456789]


@pytest.mark.parametrize(
    "text", ["bad", "0:1", "0:1:0", "0:1:-1", "2:1:0.5", "a,b", ",", "", "0:inf:1", "-1,0", "nan"]
)
def test_parse_radii_rejects(text):
    with pytest.raises(EnvelopeError, match="--radii"):
        parse_radii(text)


# ------------------------------------------------------------------------------ reports
def test_render_round_trips(frame):
    env = envelope(frame, RADII)
    back = pd.read_csv(io.StringIO(render(env, "csv")))
    assert back["certified_accuracy"].tolist() == env["certified_accuracy"].tolist()
    assert back["trial_id"].tolist() == env["trial_id"].tolist()
    records = json.loads(render(env, "json"))
    assert [r["radius"] for r in records] == RADII
    assert [r["trial_id"] for r in records] == env["trial_id"].tolist()
    assert records[0]["certified_accuracy"] == 0.75
    md = render(env, "markdown").splitlines()
    assert len(md) == len(env) + 2
    assert md[0].startswith("| radius | certified_accuracy |")
    assert md[1].startswith("|---|")
    assert md[2].startswith("| 0 | 0.750 | 0.194 | 0.994 | " + HI.trial_id)
    assert md == to_markdown(env).splitlines()
    with pytest.raises(ValueError, match="unknown format"):
        render(env, "xml")


def test_markdown_blank_for_null():
    md = to_markdown(pd.DataFrame({"a": [1.5, None], "b": ["x", None]}))
    assert md.splitlines()[2:] == ["| 1.5 | x |", "|  |  |"]


@pytest.mark.parametrize("by", [None, "sigma"])
def test_plot_envelope_writes_a_png(tmp_path, frame, by):
    out = tmp_path / "figs" / "env.png"
    plot_envelope(frame, str(out), by=by, title="t")
    data = out.read_bytes()
    assert len(data) > 1000
    assert data.startswith(b"\x89PNG\r\n\x1a\n")


def legacy_amp(t: pa.Table, amp: bool) -> pa.Table:
    """A shard as written while `amp` was a bool column."""
    i = t.schema.get_field_index("amp")
    return t.set_column(i, pa.field("amp", pa.bool_()), pa.array([amp] * t.num_rows))


def test_shards_written_while_amp_was_a_bool_still_count(tmp_path):
    """Their trials kept their ids; their amp false/true reads as off/fp16."""
    exp = Experiment(str(tmp_path), "exp")
    fp16 = LO.replace(amp="fp16")
    certified_rows.trained(exp, HI)
    certified_rows.trained(exp, fp16)
    old = legacy_amp(table(HI, _part(HI_POINTS, slice(0, 2)), [0, 1]), False)
    assert old.schema.field("amp").type == pa.bool_()
    write_table(old, exp.shard_path(HI.trial_id, CID, 0, 2))
    write_table(
        table(HI, _part(HI_POINTS, slice(2, 4)), [2, 3]), exp.shard_path(HI.trial_id, CID, 1, 2)
    )
    write_table(
        legacy_amp(table(fp16, LO_POINTS, [0, 1, 2, 3]), True),
        exp.shard_path(fp16.trial_id, CID, 0, 1),
    )
    results = load_results(exp)
    assert len(results.frame) == 8 and results.models == 2
    amp = results.frame.groupby("trial_id")["amp"].unique().to_dict()
    assert {k: list(v) for k, v in amp.items()} == {HI.trial_id: ["off"], fp16.trial_id: ["fp16"]}


# ------------------------------------------------------------------------------ unsound rows
DDRS_CERT = CertifySpec(n0=10, n=100_000, alpha=0.001, skip=1, max_points=None, ddrs=DDRSSettings())
# HI certified again with DDRS (σ_x = 1 at each point): every point correct and just past
# radius 2; it would win every radius <= 2.
DDRS_POINTS = {"correct": [True] * 4, "votes": [VOTES[2.0]] * 4}


def with_unsound_ddrs_rows(storage) -> Experiment:
    """`write_experiment` and HI's DDRS shards as `certify --ddrs` writes them, before the
    compaction that runs the memory pass (a run cut short there): no memory columns yet."""
    exp = write_experiment(storage)
    cid = DDRS_CERT.cert_id
    constants = {
        "smoothing": "data-dependent",
        "n0": DDRS_CERT.n0,
        "n": DDRS_CERT.n,
        "alpha": DDRS_CERT.alpha,
    }
    for k in (0, 1):
        part = _part(DDRS_POINTS, slice(2 * k, 2 * k + 2))
        cols = columns(part, [2 * k, 2 * k + 1], DDRS_CERT)
        shard = shard_table(HI, "exp", cid, constants, cols, {"config": HI.to_dict()})
        write_table(shard, exp.shard_path(HI.trial_id, cid, k, 2))
    return exp


def test_data_dependent_rows_before_their_memory_pass_are_read_as_unsound(tmp_path):
    frame = load_results(with_unsound_ddrs_rows(tmp_path)).frame
    dependent = (frame["cert_id"] == DDRS_CERT.cert_id).to_numpy()
    assert dependent.sum() == 4 and frame["memory_changed"].isna().all()
    assert frame["sound"].tolist() == (~dependent).tolist()
    env = envelope(frame[frame["sound"]], RADII)  # as docs/guide/reading-results.md says
    assert env["certified_accuracy"].tolist() == [0.75, 0.5, 0.25, 0.25, 0.25, 0.0]
    assert set(env["trial_id"].dropna()) == {HI.trial_id, LO.trial_id}


def test_sweeper_envelope_leaves_out_rows_that_await_their_memory_pass(tmp_path):
    """The fixed-σ models' envelope (test_envelope_by_hand), not the DDRS model's 1.0 up to
    r = 2, and stderr says what was left out and how to finish it."""
    with_unsound_ddrs_rows(tmp_path)
    args = ["envelope", "--storage", str(tmp_path), "--experiment", "exp", "--format", "csv"]
    result = CliRunner().invoke(app, [*args, "--radii", ",".join(map(str, RADII))])
    assert result.exit_code == 0, result.output
    env = pd.read_csv(io.StringIO(result.stdout))
    assert env["radius"].tolist() == RADII and "smoothing" not in env.columns
    assert env["certified_accuracy"].tolist() == [0.75, 0.5, 0.25, 0.25, 0.25, 0.0]
    winners = [HI.trial_id] * 3 + [LO.trial_id] * 2 + ["-"]  # nothing certified at 2.25
    assert env["trial_id"].fillna("-").tolist() == winners
    assert (env["models"] == 2).all() and set(env["cert_id"].dropna()) == {CID}
    assert "1 data-dependent model awaits its memory pass and is left out" in result.stderr
    assert "2 models, 8 certified points" in result.stderr
