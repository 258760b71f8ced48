"""The `envelope` certification strategy wired in (issue 28): its settings and cert_id, its
rows not estimated through the reader's checks, and the driver loop on trained digits models
(in this process: files, the envelope against `full` on the same models, resume after a stop);
the e2e test runs `sweeper certify --strategy envelope` on the session's local Ray."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sweeper import Sweep
from sweeper.api.envelope_view import plot_cover
from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import SpecError, load_space
from sweeper.plan.spec import CertifySpec
from sweeper.report.build import build_report
from sweeper.report.figures import draw_figure
from sweeper.report.render import envelope_figure
from sweeper.results.certify_rows import load_results
from sweeper.results.envelope_records import read_records
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from sweeper.run import envelope_bounds as eb
from sweeper.run import shards
from sweeper.run.certify_stage import CERTIFY
from sweeper.run.envelope_run import RADII, EnvelopeCertifier
from sweeper.run.outcome import Outcome
from trainables.attestations import attest_training
from trainables.kernel.cert_ids import CertId
from trainables.kernel.trial_status import write_status
from trainables.train import fit

SPACE = """
fixed: {dataset: digits, method: gaussian, m_train: 1, batch_size: 64, lr: 0.02, eval_subset: 64}
grids:
  - name: g
    axes: {sigma: [0.25, 0.5], epochs: [1, 4]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 32, n: 400, alpha: 0.001, skip: 15, max_points: null, batch_size: 400, shard_size: 10}
"""


class Local:
    """Tasks run in this process when waited for; counts what was submitted."""

    def __init__(self):
        self.results, self.names = {}, []

    def submit(self, fn, options, *args):
        self.names.append(fn.__name__)
        self.results[len(self.names)] = fn(*args)
        return len(self.names)

    def wait(self, handles, timeout):
        return list(handles)

    def get(self, handle):
        return self.results[handle]

    def cancel(self, handle):
        pass


def test_strategy_settings_and_cert_ids():
    assert CertifySpec().cert_id == "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500"
    env = CertifySpec(strategy="envelope")
    assert env.cert_id.endswith("_max-500_envelope") and env.pilot_stages == (
        1000,
        3000,
        10000,
        30000,
    )
    other = CertifySpec(strategy="envelope", n=200, delta=0.05, pilots=(10, 30))
    assert other.cert_id.endswith("_envelope-delta-0.05-pilots-10-30") and other.problems() == []
    assert CertifySpec(strategy="envelope", n=200).pilot_stages == (2, 6, 20, 60)
    assert CertifySpec(strategy="envelope", n=200, pilots=(300,)).problems()
    assert CertifySpec(strategy="envelope", ddrs={}).problems()  # type: ignore[arg-type]
    for spec in (env, other):
        assert CertId.parse(spec.cert_id) == spec.cert


def test_envelope_settings_where_strategy_full_certifies_are_refused(tmp_path):
    """--pilots, --radii and --delta (or pilots: in YAML) under strategy full would do nothing:
    exit 2 naming the flag, before anything starts; with --strategy envelope they are taken."""
    space = tmp_path / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    args = ["certify", str(space), "--storage", str(tmp_path / "s"), "--pilots", "10,30"]
    result = CliRunner().invoke(app, [*args, "--delta", "0.05"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    for flag in ("--pilots", "--delta"):
        assert f"{flag} is a setting of --strategy envelope" in result.output
    assert "--radii is" not in result.output
    result = CliRunner().invoke(app, [*args, "--strategy", "envelope"])
    assert "is a setting of --strategy envelope" not in result.output
    assert not (tmp_path / "s").exists()  # refused before anything was written

    bad = textwrap.dedent(SPACE).replace("shard_size: 10}", "shard_size: 10, radii: [0, 0.5]}")
    (tmp_path / "bad.yaml").write_text(bad + "smoke: {certify: {delta: 0.05}}\n")
    with pytest.raises(SpecError) as e:
        load_space(str(tmp_path / "bad.yaml"))
    assert [p.split(" is ")[0] for p in e.value.problems] == [
        "bad.yaml: certify.radii",
        "bad.yaml: smoke.certify.delta",
    ]
    good = bad.replace("radii:", "strategy: envelope, radii:")
    (tmp_path / "good.yaml").write_text(good)
    assert load_space(str(tmp_path / "good.yaml")).certify.radii == (0, 0.5)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, signing_key):
    tmp = tmp_path_factory.mktemp("envelope")
    space = tmp / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    spec = load_space(str(space))
    trials = expand(spec)
    exp = Experiment(str(tmp / "store"), "tiny")
    write_sweep(exp, {"space": {}, "trials": [t.to_dict() for t in trials]})
    for cfg in trials:
        state = fit(cfg, exp.checkpoint(cfg.trial_id), device=torch.device("cpu"))
        attest_training(
            exp.trial_dir(cfg.trial_id), cfg, exp.checkpoint(cfg.trial_id), None, signing_key
        )
        write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", state.epoch, state.history[-1])
    return space, spec, exp, trials


def certify_envelope(exp, trials, spec, resources, on_event, **kw) -> tuple[Outcome, object]:
    """`sweeper certify`'s way: `trials` (finished) all arriving at once, in the order given,
    certified under the envelope strategy until every model is certified or pruned."""
    certifier = EnvelopeCertifier(exp, spec, resources, on_event, declared=len(trials), **kw)
    for cfg in trials:
        certifier.submit(cfg)
    certifier.wait()
    certifier.finish()
    outcome = Outcome()
    outcome.failures += certifier.failure_rows()
    return outcome, certifier.ledger


def _run(exp, trials, spec, **kw):
    tasks = Local()
    outcome, ledger = certify_envelope(
        exp,
        trials,
        spec,
        _res(),
        lambda e: None,
        tasks=tasks,
        sizer=lambda d, _: 450,
        **kw,
    )
    return outcome, ledger, tasks


def _res():
    from sweeper.plan.spec import Resources

    return Resources(cpu=1, gpu=0)


def test_envelope_run_files_resume_and_equal_envelope(trained):
    _, spec, exp, trials = trained
    env = dataclasses.replace(spec.certify, strategy="envelope")
    _, first, tasks = _run(exp, trials, env, max_steps=1)
    stopped = sum(m.stage for m in first.models.values())  # pilot stages drawn so far
    assert tasks.names.count("pilot_task") == stopped and stopped in (len(trials), len(trials) + 1)
    _, ledger, tasks = _run(exp, trials, env)  # resumed: what is on storage is read back
    drawn = sum(m.stage for m in ledger.models.values())
    assert tasks.names.count("pilot_task") == drawn - stopped
    _, again, tasks = _run(exp, trials, env)  # finished: nothing is drawn again
    assert tasks.names == ["labels_task"]  # the data set's labels, to check what is read back
    statuses = {m: again.status(m) for m in again.models}
    assert set(statuses.values()) <= {"certified", "pruned"}
    assert np.array_equal(again.envelope(), ledger.envelope())
    records = read_records(exp)
    assert {k[0] for k in records} == {t.trial_id for t in trials}
    for (tid, _), r in records.items():
        assert r["status"] == statuses[tid] and len(r["upper"]) == len(RADII)
    # the rows of certified models pass the reader's checks; not-estimated rows among them
    frame = load_results(exp).frame
    assert load_results(exp).invalid == []
    certified = {t for t, s in statuses.items() if s == "certified"}
    assert set(frame[frame.cert_id == env.cert_id].trial_id) == certified
    # full on the same models: the same draws per point, so the same certificates on every
    # point the strategy drew, the same envelope, and its winners among full's best
    for cfg in trials:
        for shard in shards.plan(cfg, "certify", spec.certify, 450):
            shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    frame = load_results(exp).frame
    full = frame[frame.cert_id == spec.certify.cert_id].set_index(["trial_id", "idx"])
    mine = frame[frame.cert_id == env.cert_id].set_index(["trial_id", "idx"])
    drawn = mine[mine["count"].notna()]
    assert len(drawn) and (drawn["count"] == full.loc[drawn.index, "count"]).all()
    assert (drawn["predict"] == full.loc[drawn.index, "predict"]).all()
    for radius in RADII:
        best = _counts(full, radius)
        ours = _counts(mine, radius)
        assert best.max() == ours.max(), radius
        if ours.max() > 0:
            assert ours.idxmax() in set(best[best == best.max()].index), radius
        # a certified model's count is full's from its record's exact_from on, never more
        for (tid, _), r in records.items():
            if r["status"] == "certified":
                assert ours[tid] <= best[tid], (tid, radius)
                if r["exact_from"] is not None and radius >= r["exact_from"]:
                    assert ours[tid] == best[tid], (tid, radius)
    assert eb.model_delta(1, 0.01) < 0.01
    _views_of_one_setting(exp, spec.certify.cert_id, env.cert_id)
    _covered_numbers_are_fulls(exp, statuses)


def _covered_numbers_are_fulls(exp: Experiment, statuses: dict[str, str]) -> None:
    """Every envelope number marked `covered` equals full certification's, on the grid and
    between its radii, globally and per `--by` group; one that differs is never covered
    (issue 39 §1)."""
    radii = [round(0.05 * k, 10) for k in range(31)]  # 0:1.5:0.05, the grid's radii among them
    full = Sweep(storage=exp.storage, experiment=exp.name, only="strategy=full")
    ours = Sweep(storage=exp.storage, experiment=exp.name, only="strategy=envelope")
    assert "covered" not in full.envelope(radii)  # full: every number is exact
    for by in (None, "sigma", "epochs"):
        exact, shown = full.envelope(radii, by=by), ours.envelope(radii, by=by)
        assert len(exact) == len(shown) and "covered" in shown, by
        same = np.isclose(exact["certified_accuracy"], shown["certified_accuracy"])
        assert (same | ~shown["covered"]).all(), by  # covered => full's number
        assert (shown["certified_accuracy"] <= exact["certified_accuracy"] + 1e-12).all()
        on_grid = shown["radius"].isin(RADII)
        if by is None:  # the strategy's own guarantee: every grid radius of the envelope
            assert shown.loc[on_grid, "covered"].all()
    assert set(statuses.values()) <= {"certified", "pruned"}
    # the plot: a curve is solid only where it is full's, per group and over all
    mine, theirs = ours.read().frame, full.read().frame
    cover = plot_cover(exp, mine, {"strategy": "envelope"}, "epochs")
    drawn = envelope_figure(mine, "epochs", radii=[1.5], cover=cover)
    exact = envelope_figure(theirs, "epochs", radii=[1.5])
    assert plot_cover(exp, theirs, {"strategy": "full"}, "epochs") is None
    dotted = 0
    for c, e in zip(drawn.curves, exact.curves, strict=True):
        assert c.label == e.label and c.covered is not None
        assert np.allclose(c.accuracy[c.covered], e.accuracy[c.covered]), c.label
        dotted += int((~c.covered).sum())
    # what is outside the guarantee, if any, is drawn dotted (a pruned model's bound, or a
    # certified model's count below its exact_from; the exact cases of both are
    # tests/test_envelope_view.py's)
    lines = draw_figure(drawn).axes[0].get_lines()
    assert any(line.get_linestyle() == ":" for line in lines) == bool(dotted)
    # the report: the winners' table marks exactly the uncovered numbers ≥
    shown = ours.envelope(radii)
    cover = plot_cover(exp, mine, {"strategy": "envelope"}, "method")
    report = build_report(mine, radii, {"digits": 64}, ("png",), cover=cover)
    text = next(f.data.decode() for f in report.files if f.name == "envelope.md")
    wide, winners = text.split("## Upper envelope per ℓ2 radius and its winner")
    uncovered = int((~shown["covered"]).sum())
    assert len([line for line in winners.splitlines() if "| ≥" in line]) == uncovered
    assert wide.count("| ≥") == uncovered  # the same numbers in the wide table's row


def _views_of_one_setting(exp: Experiment, full_id: str, envelope_id: str) -> None:
    """Both strategies certified the same trials: `--only strategy=` and `--only cert_id=`
    read one of them (issue 39 §4), in `Sweep` and on the command line alike."""
    for only, cert_id in [
        ("strategy=full", full_id),
        ("strategy=envelope", envelope_id),
        (f"cert_id={envelope_id}", envelope_id),
    ]:
        sweep = Sweep(storage=exp.storage, experiment=exp.name, only=only)
        assert set(sweep.read().frame["cert_id"]) == {cert_id}, only
        table = sweep.table(list(RADII))
        assert set(table["cert_id"]) == {cert_id} and "strategy" not in table, only
    base = ["envelope", "--storage", exp.storage, "--experiment", exp.name, "--format", "csv"]
    result = CliRunner().invoke(app, [*base, "--only", "strategy=full"])
    assert result.exit_code == 0 and envelope_id not in result.output, result.output
    result = CliRunner().invoke(app, [*base, "--only", "strategy=all,cert_id=x"])
    assert result.exit_code == 2 and "--only strategy=all: expected envelope or full" in (
        result.output
    )


def _counts(rows, radius: float):
    """Certified-correct points per model at `radius`."""
    hit = rows["correct"] & (rows["radius"] >= radius)
    return hit.groupby(level="trial_id").sum()


@pytest.mark.e2e
def test_sweeper_certify_strategy_envelope_on_a_local_ray(ray_session, trained):
    space, spec, exp, trials = trained
    args = ["certify", str(space), "--storage", exp.storage, "--experiment", exp.name]
    result = CliRunner().invoke(
        app,
        [*args, "--cpu-only", "--strategy", "envelope", "--delta", "0.02"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "exact CERTIFY" in " ".join(result.output.split())
    cert_id = dataclasses.replace(spec.certify, strategy="envelope", delta=0.02).cert_id
    records = {k[0]: r for k, r in read_records(exp).items() if k[1] == cert_id}
    assert set(records) == {t.trial_id for t in trials}
    assert {r["status"] for r in records.values()} <= {"certified", "pruned"}
    for tid, r in records.items():
        pilot = exp.pilot_path(tid, cert_id, 1)
        assert (pilot and __import__("os").path.exists(pilot)) and len(r["upper"]) == len(RADII)
    assert load_results(exp).invalid == []


def test_models_arriving_one_by_one_are_certified_between_arrivals_and_keep_their_numbers(
    trained,
):
    """`run grid`'s way: each model arrives as its trial finishes and steps run in between;
    the arrival numbers (δ shares) are kept on storage, so a later run in another order
    gives each model the same number and computes nothing."""
    import json
    from pathlib import Path

    from sweeper.results.envelope_records import settled

    _, spec, exp, trials = trained
    env = dataclasses.replace(spec.certify, strategy="envelope", delta=0.05)
    tasks = Local()
    certifier = EnvelopeCertifier(exp, env, _res(), lambda e: None, tasks=tasks, sizer=_size)
    order = list(reversed(trials))
    for k, cfg in enumerate(order):
        certifier.submit(cfg)
        for _ in range(8):
            certifier.poll()
        if k == 0:  # alone, the first model is piloted and certified before the next comes
            assert certifier.ledger.status(cfg.trial_id) == "certified"
    certifier.wait()
    certifier.finish()
    numbers = {m: certifier.ledger.models[m].arrival for m in certifier.ledger.models}
    assert numbers == {cfg.trial_id: j for j, cfg in enumerate(order, start=1)}
    assert json.loads(Path(exp.arrivals_json(env.cert_id)).read_text()) == list(numbers)
    assert settled(exp, [t.trial_id for t in trials], env.cert_id)
    _, again, tasks = _run(exp, trials, env)  # the plan's order now: numbers kept
    assert tasks.names == ["labels_task"]  # nothing drawn again
    assert {m: again.models[m].arrival for m in again.models} == numbers


def _size(dataset, data_dir):
    return 450


@pytest.mark.e2e
def test_run_grid_strategy_envelope_certifies_as_trials_finish(ray_session, trained):
    """`sweeper run grid --strategy envelope` trains and certifies on the local Ray; every
    model ends certified or pruned, and running it again draws nothing (its certifier replays
    the rows: a stored verdict is never read back)."""
    space, spec, exp, trials = trained
    args = ["run", "grid", str(space), "--storage", exp.storage, "--experiment", "grid-env"]
    flags = ["--cpu-only", "--strategy", "envelope", "--delta", "0.03"]
    result = CliRunner().invoke(app, [*args, *flags], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "exact CERTIFY" in " ".join(result.output.split())
    grid = Experiment(exp.storage, "grid-env")
    cert_id = dataclasses.replace(spec.certify, strategy="envelope", delta=0.03).cert_id
    records = {k[0]: r for k, r in read_records(grid).items() if k[1] == cert_id}
    assert set(records) == {t.trial_id for t in trials}
    assert {r["status"] for r in records.values()} <= {"certified", "pruned"}
    assert "certified" in {r["status"] for r in records.values()}
    assert load_results(grid).invalid == []
    pilots = sorted(Path(grid.certify_dir).rglob("pilot-*.parquet"))
    written = {p: p.stat().st_mtime_ns for p in Path(grid.certify_dir).rglob("*.parquet")}
    again = CliRunner().invoke(app, [*args, *flags], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert pilots and written == {
        p: p.stat().st_mtime_ns for p in Path(grid.certify_dir).rglob("*.parquet")
    }


class LosesNodes(Local):
    """Local tasks whose first `lost` pilot tasks die with their node (Ray's NodeDiedError)."""

    def __init__(self, lost: int):
        super().__init__()
        self.lost = lost

    def submit(self, fn, options, *args):
        if fn.__name__ == "pilot_task" and self.lost:
            from ray import exceptions as rx

            self.lost -= 1
            self.names.append("lost")
            self.results[len(self.names)] = rx.NodeDiedError("the node it ran on is dead")
            return len(self.names)
        return super().submit(fn, options, *args)

    def get(self, handle):
        result = self.results[handle]
        if isinstance(result, Exception):
            raise result
        return result


def test_a_pilot_lost_with_its_node_runs_again_without_spending_the_error_budget(trained):
    """The envelope strategy's pilot tasks are retried as the engine's shards are: a node's
    death is charged to its own budget (failures.json `retried`), not to the errors."""
    import json
    from pathlib import Path

    _, spec, exp, trials = trained
    env = dataclasses.replace(spec.certify, strategy="envelope", delta=0.07)
    tasks = LosesNodes(lost=2)
    certifier = EnvelopeCertifier(exp, env, _res(), lambda e: None, tasks=tasks, sizer=_size)
    for cfg in trials:
        certifier.submit(cfg)
    certifier.wait()
    certifier.finish()
    assert tasks.names.count("lost") == 2 and certifier.failure_rows() == []
    statuses = {certifier.ledger.status(m) for m in certifier.ledger.models}
    assert len(certifier.ledger.models) == len(trials) and statuses <= {"certified", "pruned"}
    retried = json.loads(Path(exp.failures_json).read_text())
    assert "node_losses" in json.dumps(retried) and '"errors"' not in json.dumps(retried)
