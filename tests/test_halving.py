"""Stopping inside a trial (issue 37, item 4): the halving rule on known curves, the proxy's
carve and radii, its settings, and the record a resumed driver reads."""

from __future__ import annotations

import json

import pytest
import torch

from sweeper.plan.sweep_plan import is_halted
from sweeper.results.halving_records import read_halving, write_halving
from sweeper.results.storage import Experiment
from sweeper.run.halving import keeps
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ConfigError
from trainables.proxy import Proxy, carve, proxy_radii

BASE = dict(dataset="digits", method="gaussian", sigma=0.25, epochs=4)


def test_a_rung_keeps_the_top_third_at_any_radius():
    recorded = [[0.9, 0.5], [0.8, 0.7], [0.7, 0.2], [0.6, 0.1], [0.5, 0.3], [0.4, 0.0]]
    # the 2/3 quantile: 0.7667 at radius 0, 0.4333 at radius 1
    kept = [keeps(c, recorded, 3) for c in recorded]
    assert kept == [True, True, False, False, False, False]


def test_a_model_that_leads_at_one_radius_only_continues():
    recorded = [[0.9, 0.1], [0.8, 0.2], [0.5, 0.6]]
    assert keeps([0.5, 0.6], recorded, 2)


def test_fewer_curves_than_eta_halt_nothing_and_flat_radii_say_nothing():
    assert keeps([0.0, 0.0], [[0.9, 0.9], [0.0, 0.0]], 3)
    flat = [[0.5, 0.0], [0.5, 0.0], [0.5, 0.0]]
    assert all(keeps(c, flat, 2) for c in flat)
    # zeros tied at the bottom of a radius are not its top, whatever the quantile says
    assert not keeps([0.3, 0.0], [[0.6, 0.2], [0.3, 0.0], [0.3, 0.0]], 2)


def test_the_carve_is_fixed_disjoint_and_refuses_a_split_too_small():
    train, held = carve(100, 20)
    assert len(held) == 20 and len(train) == 80 and not set(train) & set(held)
    assert carve(100, 20) == (train, held) and sorted(train + held) == list(range(100))
    with pytest.raises(Exception, match="proxy_points \\(100\\) must be below"):
        carve(100, 100)


def test_the_proxy_radii_stop_where_its_draws_can_certify():
    # σ Φ⁻¹(0.001^(1/100)) = 1.501 σ: radii 0, σ/2, σ, 3σ/2
    assert proxy_radii(0.5, 100) == [0.0, 0.25, 0.5, 0.75]
    # 0.001^(1/20) = 0.708: Φ⁻¹ = 0.548 σ
    assert proxy_radii(0.25, 20) == [0.0, 0.125]


def test_the_proxy_settings_leave_other_trials_ids_alone_and_check_themselves():
    plain = TrialConfig(**BASE)
    on = TrialConfig(**BASE, proxy_every=2)
    assert (on.proxy_points, on.proxy_n) == (200, 100) and plain.proxy_points is None
    assert on.trial_id != plain.trial_id
    assert "proxy" not in json.dumps(plain.identity())
    with pytest.raises(ConfigError) as e:
        TrialConfig(**BASE, proxy_every=4, proxy_n=5)
    assert "proxy_n must be >= 10" in str(e.value) and "proxy_every (4) must be below" in str(
        e.value
    )


def test_the_proxy_certifies_held_out_training_inputs_and_leaves_the_model_as_it_was():
    cfg = TrialConfig(**BASE, proxy_every=1, proxy_points=50, proxy_n=20)
    proxy = Proxy(cfg, torch.device("cpu"))
    assert proxy.xs.shape == (50, 1, 8, 8) and proxy.radii == [0.0, 0.125]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).train()
    before = [p.detach().clone() for p in model.parameters()]
    first, again = proxy.curve(model, 1), proxy.curve(model, 1)
    assert first == again and len(first) == 2 and 0 <= first[1] <= first[0] <= 1
    assert model.training and all(
        torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
    )
    # a constant classifier is right on the held-out inputs of its class, at every radius
    constant = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        constant[1].weight.zero_()
        constant[1].bias.copy_(torch.arange(10.0) == 3)
    share = int((proxy.ys == 3).sum()) / 50
    assert proxy.curve(constant, 1) == [share, share]


def test_the_record_round_trips_and_a_malformed_one_is_left_out(tmp_path):
    exp = Experiment(str(tmp_path), "e")
    tmp_path.joinpath("e").mkdir()
    doc = {"eta": 3, "rungs": {"sigma=0.25/epoch=2/radii=4": {"a" * 12: [0.5, 0.1]}}, "halted": {}}
    write_halving(exp, doc)
    assert read_halving(exp) == {**doc, "version": 1}
    tmp_path.joinpath("e", "halving.json").write_text('{"version": 1, "rungs": [], "halted": {}}')
    assert read_halving(exp) is None


def test_a_halted_trial_stays_halted_only_under_the_same_rate():
    halted = {"state": "halted", "epoch": 2, "halving": 3}
    assert is_halted(halted, 3)
    assert not is_halted(halted, 2) and not is_halted(halted, None)
    assert not is_halted({"state": "running", "epoch": 2}, 3) and not is_halted(None, 3)


def _trials(n: int, sigma: float = 0.25):
    from types import SimpleNamespace

    from sweeper.run.tune_names import TuneTrials

    handed = TuneTrials({})
    trials = []
    for k in range(n):
        cfg = TrialConfig(**{**BASE, "sigma": sigma, "lr": 0.01 * (k + 1)}, proxy_every=1)
        handed.hand(f"tune{k}", cfg)
        trials.append(SimpleNamespace(trial_id=f"tune{k}", cfg=cfg))
    return handed, trials


def test_the_scheduler_stops_below_the_rung_records_it_and_resumes_from_the_record(tmp_path):
    from ray.tune.schedulers import TrialScheduler

    from sweeper.run.halving import Halving

    exp = Experiment(str(tmp_path), "e")
    tmp_path.joinpath("e").mkdir()
    handed, trials = _trials(4)
    halving = Halving(exp, 2, handed)
    curves = [[0.8, 0.4], [0.6, 0.5], [0.5, 0.3], [0.7, 0.45]]
    said = [
        halving.on_trial_result(None, t, {"epoch": 1, "proxy": c})
        for t, c in zip(trials, curves, strict=True)
    ]
    # the first alone continues; the third is lowest at both radii; the fourth is above the
    # median at both among four
    assert said == [TrialScheduler.CONTINUE] * 2 + [TrialScheduler.STOP, TrialScheduler.CONTINUE]
    third = trials[2].cfg.trial_id
    assert halving.stopped == halving.halted == {third: 1}
    assert halving.on_trial_result(None, trials[0], {"epoch": 2}) == TrialScheduler.CONTINUE
    # a new driver reads the rungs and the halts, and has stopped nothing itself yet
    again = Halving(exp, 2, handed)
    assert again.halted == {third: 1} and again.stopped == {}
    assert len(again.rungs["sigma=0.25/epoch=1/radii=2"]) == 4
    # the halted trial trained on anyway (its halt was not written when the driver died): past
    # its next rung, the record no longer calls it halted
    assert again.on_trial_result(None, trials[2], {"epoch": 2, "proxy": [0.9, 0.5]}) == "CONTINUE"
    assert again.halted == {}
    # another rate judges every trial anew; σ apart: another σ's rung is not this one's
    assert Halving(exp, 3, handed).rungs == {}
    handed_b, other = _trials(1, sigma=0.5)
    assert (
        Halving(exp, 2, handed_b).on_trial_result(None, other[0], {"epoch": 1, "proxy": [0.0, 0.0]})
        == TrialScheduler.CONTINUE
    )


def test_halving_without_the_trials_proxy_is_refused_before_ray(tmp_path):
    from tests.test_e2e import run_cli

    result = run_cli("run", "grid", "digits", "--storage", tmp_path, "--halving", "3", "--dry-run")
    assert result.exit_code == 2
    assert "halving (--halving, search.halving) needs every trial's proxy, and 34 of 34" in (
        " ".join(result.output.split())
    )
    assert "Traceback" not in result.output
    bad = run_cli("run", "grid", "digits", "--storage", tmp_path, "--halving", "1", "--dry-run")
    assert bad.exit_code == 2 and "--halving must be an integer >= 2 (got 1)" in bad.output


def test_the_dry_run_prices_a_trial_on_the_inputs_it_trains_on():
    from sweeper.plan.cost import TRAIN_SIZE, train_inputs

    on = TrialConfig(**BASE, proxy_every=2, proxy_points=150)
    assert train_inputs(on) == TRAIN_SIZE["digits"] - 150
    assert train_inputs(TrialConfig(**BASE)) == TRAIN_SIZE["digits"]


def test_a_trial_with_the_proxy_resumes_bitwise_and_never_trains_on_its_held_out_inputs(
    tmp_path, monkeypatch
):
    from test_training import assert_nested_equal

    from trainables import pipeline
    from trainables.train import fit

    cfg = TrialConfig(
        **{**BASE, "epochs": 3, "batch_size": 64},
        arch="digits_cnn",
        train_subset=300,
        eval_subset=40,
        proxy_every=1,
        proxy_points=60,
        proxy_n=20,
    )
    seen: set[int] = set()
    real = pipeline.DeviceLoader.__iter__

    def noting(self):
        for x, y, idx in real(self):
            if self.shuffle:  # the training batches (the evaluation's are the test split's)
                seen.update(idx.tolist())
            yield x, y, idx

    monkeypatch.setattr(pipeline.DeviceLoader, "__iter__", noting)
    cpu = torch.device("cpu")
    first = fit(cfg, tmp_path / "a" / "checkpoint.pt", device=cpu, stop_after=1)
    resumed = fit(cfg, tmp_path / "a" / "checkpoint.pt", device=cpu)
    straight = fit(cfg, tmp_path / "b" / "checkpoint.pt", device=cpu)
    assert_nested_equal(resumed.payload()["model"], straight.payload()["model"], "model")
    assert_nested_equal(resumed.payload()["rng"], straight.payload()["rng"], "rng")
    assert [h.get("proxy") is not None for h in straight.history] == [True, True, False]
    assert first.history[0]["proxy"] == straight.history[0]["proxy"]
    _, held = carve(1347, 60)
    assert len(seen) == 300 and not seen & set(held)  # the held-out inputs are never trained on
