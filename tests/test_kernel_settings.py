"""One settings system (issue 27 §2): `trainables.kernel.settings` declares the trial's, the
stages' and the launch's settings, and one bound phrases a problem the way a space's YAML
(`problems`) or a trial's configuration (`unmet`) says it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeper.plan import spec as plan_spec
from trainables.kernel.config import TrialConfig, required
from trainables.kernel.config_parts import PSEUDO_FIELDS
from trainables.kernel.ddrs_settings import DDRS_FIELDS, DDRSSettings
from trainables.kernel.errors import ConfigError
from trainables.kernel.settings import (
    AtLeast,
    Between,
    NotBelow,
    OneOf,
    Positive,
    TrueOrFalse,
    declared,
)
from trainables.kernel.stage_settings import CertifySpec, EmpiricalSetting, EmpiricalSpec
from trainables.methods import DDN_SETTINGS, METHOD_SETTINGS, REGISTRY, method_label

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("bound", "bad", "yaml", "trial"),
    [
        (AtLeast(1), 0, "x must be an integer >= 1 (got 0)", "x must be >= 1 (got 0)"),
        (Positive(), -1.0, "x must be > 0 (got -1.0)", "x must be > 0 (got -1.0)"),
        (NotBelow(0), -2, "x must be a number >= 0 (got -2)", "x must be >= 0 (got -2)"),
        (
            Between(0, 0.5),
            1,
            "x must be a number in (0, 0.5) (got 1)",
            "x must be in (0, 0.5) (got 1)",
        ),
        (OneOf(("a", "b")), "c", "unknown x 'c' (valid: a, b)", "x must be a or b (got c)"),
    ],
)
def test_one_bound_two_phrasings(bound, bad, yaml, trial):
    assert bound.problems("x", bad) == [yaml]
    assert bound.unmet("x", bad) == [trial]
    assert bound.problems("x", None) == bound.unmet("x", None) == []  # null: unset


def test_a_required_setting_must_be_set_and_null_can_be_said():
    assert AtLeast(1).unmet("m", None, where=" for method 'g'", required=True) == [
        "m must be >= 1 for method 'g' (got None)"
    ]
    assert TrueOrFalse().unmet("d", None, required=True) == ["d must be true or false (got None)"]
    assert TrueOrFalse().unmet("d", False, required=True) == []
    assert AtLeast(1).unmet("s", 0, null=True) == ["s must be >= 1 or null (got 0)"]


def test_trial_bounds_are_declared_and_method_scoped():
    names = {f.name for f in declared(TrialConfig)}
    assert {"sigma", "m_train", "epsilon", "lam", "epochs", "lr", "amp"} <= names
    with pytest.raises(ConfigError) as e:
        TrialConfig(method="gaussian", m_train=0)
    assert e.value.problems == ["m_train must be >= 1 for method 'gaussian' (got 0)"]
    # a method's setting another method does not use is not checked (and resolves to None)
    assert TrialConfig(method="gaussian", lam=-1.0).lam is None
    with pytest.raises(ConfigError, match="lam must be >= 0 for method 'macer'"):
        TrialConfig(method="macer", lam=-1.0)


@pytest.mark.parametrize(
    "f", [f for f in declared(TrialConfig) if f.name not in METHOD_SETTINGS], ids=lambda f: f.name
)
def test_every_declared_trial_bound_is_checked(f):
    bound = f.metadata["bound"]
    bad = {AtLeast: -5, Positive: -1.0, NotBelow: -1.0, OneOf: "nope"}[type(bound)]
    assert not bound.holds(bad)
    # DDRS training's settings are checked when it is on (for MACER, which uses them all),
    # self-training's when it is
    on = {"method": "macer", "ddrs_start_epoch": 0} if f.name in DDRS_FIELDS[1:] else {}
    if f.name in PSEUDO_FIELDS:
        on = {"pseudo_data": "/data/pseudo.npz", "pseudo_fingerprint": "0" * 16}
    with pytest.raises(ConfigError) as e:
        TrialConfig(**on, **{f.name: bad})
    assert any(p.startswith((f"{f.name} must be", f"unknown {f.name} ")) for p in e.value.problems)


def test_the_getter_of_a_used_setting_is_required():
    assert required(3, "steps") == 3
    with pytest.raises(ConfigError, match="steps is unset but the trial uses it"):
        required(None, "steps")


def test_the_space_holds_the_kernels_stage_settings():
    assert plan_spec.CertifySpec is CertifySpec and plan_spec.EmpiricalSpec is EmpiricalSpec
    assert dataclasses.is_dataclass(EmpiricalSetting)


def test_certify_settings_resolve_sigma_for_the_model_and_batch_points():
    spec = CertifySpec(n0=100, batch_size=1000)
    run = spec.resolved(0.5)
    assert run.sigma == 0.5 and spec.sigma is None and spec.cert_id.startswith("sigma-train_")
    fixed = CertifySpec(sigma=0.25)
    assert fixed.resolved(0.5) is fixed
    assert spec.points(100) == 10 and spec.points(3) == 3
    assert dataclasses.replace(spec, points_per_batch=4).points(100) == 4


def _refused(**config) -> list[str]:
    with pytest.raises(ConfigError) as e:
        TrialConfig(**config)
    return e.value.problems


def test_what_was_checked_by_hand_is_a_declared_bound():
    """DDN's two settings, SmoothMix's bound on its adversary, self-training's and data
    parallelism's numbers, DDRS certification's parts: each a `setting` with its bound, checked
    by the one mechanism (issue 41 item 2); null stays a value where it means one."""
    bounds = {f.name: f.metadata["bound"] for f in declared(TrialConfig)}
    assert bounds["ddn_gamma"] == Between(0, 1) and bounds["ddn_init_norm"] == Positive()
    assert bounds["mix_maxnorm"] == Positive() and bounds["data_parallel"] == AtLeast(1)
    assert bounds["pseudo_eta"] == NotBelow(0) and bounds["pseudo_ratio"] == AtLeast(1)
    assert _refused(attack="ddn", ddn_init_norm=0.0, ddn_gamma=1.0) == [
        "ddn_init_norm must be > 0 or null for method 'smoothadv' (got 0.0)",
        "ddn_gamma must be in (0, 1) for method 'smoothadv' (got 1.0)",
    ]
    assert _refused(attack="ddn", ddn_gamma=None) == [
        "ddn_gamma must be in (0, 1) for method 'smoothadv' (got None)"
    ]
    assert TrialConfig(attack="ddn").ddn_init_norm is None  # null: the epoch's ε
    assert TrialConfig(method="smoothmix").mix_maxnorm is None  # null: no bound
    assert _refused(method="smoothmix", mix_maxnorm=-1) == [
        "mix_maxnorm must be > 0 or null for method 'smoothmix' (got -1)"
    ]
    pseudo = {"pseudo_data": "/data/p.npz", "pseudo_fingerprint": "0" * 16}
    assert _refused(**pseudo, pseudo_eta=-1, pseudo_ratio=0) == [
        "pseudo_eta must be >= 0 when pseudo_data is set (got -1)",
        "pseudo_ratio must be >= 1 when pseudo_data is set (got 0)",
    ]
    assert _refused(data_parallel=0) == ["data_parallel must be >= 1 or null (got 0)"]
    assert DDRSSettings(iterations=0, lr=0, samples=None).problems() == [  # type: ignore[arg-type]
        "samples must be set (got None)",
        "iterations must be an integer >= 1 (got 0)",
        "lr must be > 0 (got 0)",
    ]
    assert DDRSSettings().problems() == []


def test_method_special_cases_live_in_the_methods_row():
    """DDN's settings count with attack ddn only (`attack_settings`), SmoothMix's one-step
    adversary needs two steps (`checks`), SmoothAdv's label names its attack (`labels_attack`):
    each said by its row, none by a test of the method's name outside the table."""
    smoothadv, smoothmix = REGISTRY["smoothadv"], REGISTRY["smoothmix"]
    assert set(DDN_SETTINGS) <= smoothadv.used("ddn")
    assert not set(DDN_SETTINGS) & smoothadv.used("pgd")
    assert smoothadv.used("pgd") == frozenset(smoothadv.settings) - set(DDN_SETTINGS)
    assert TrialConfig(attack="pgd", ddn_gamma=7.0).ddn_gamma is None  # unused: not checked
    refusal = (
        "mix_step 1 (the one-step adversary) needs steps >= 2 for method 'smoothmix': the "
        "reference code takes it at the start of step 2, so with steps 1 it trains exactly as "
        "mix_step 0; set mix_step: 0 or steps >= 2"
    )
    assert _refused(method="smoothmix", steps=1, mix_step=1) == [refusal]
    assert smoothmix.problems(TrialConfig(method="smoothmix", steps=2, mix_step=1)) == []
    assert smoothmix.problems(SimpleNamespace(steps=1, mix_step=1)) == [refusal]  # type: ignore[arg-type]
    assert REGISTRY["macer"].problems(TrialConfig(method="macer")) == []
    assert [method_label("smoothadv", "ddn"), method_label("smoothmix", "pgd")] == [
        "SmoothAdv-DDN",
        "SmoothMix",
    ]
    assert method_label("trades") == "trades" and method_label("smoothadv") == "SmoothAdv"
    source = (ROOT / "trainables" / "kernel" / "config_parts.py").read_text()
    assert "smoothmix" not in source and '"ddn"' not in source
