"""Search spaces -> SweepSpec -> grid expansion -> --only selection (no Ray, no torch)."""

from __future__ import annotations

import collections
import dataclasses
import textwrap

import pytest
import yaml

from sweeper.plan.grid import expand, expansion_problems, parse_only, select, trial_count
from sweeper.plan.spaces import (
    SPACES_DIR,
    SpecError,
    available_spaces,
    load_space,
    parse_spec,
    resolve_space_path,
)
from sweeper.plan.spec import CertifySpec, Resources, SweepSpec
from trainables.kernel.config import TrialConfig

# The first cifar10 trial (sigma 0.12, eps 0.25, T 2, m 1, pgd), computed once and pinned:
# a change means every stored result of an existing sweep would be orphaned. (Changed once on
# purpose, from 4b827903d4a5, when SmoothAdv's warm-up and attacks followed the reference
# code: warmup_schedule joined the identity of attack-trained trials.)
# Issue 26 §5 gave SmoothAdv trained from scratch on CIFAR-10 the reference's input layer
# (scale_input: false), a new id; spelled as before (scale_input: true) it keeps its old one.
PINNED_CIFAR10_FIRST_ID = "50997db9748a"
CIFAR10_FIRST_ID_BEFORE_ISSUE_26 = "cb7238384c91"


@pytest.fixture(scope="module")
def specs() -> dict[str, SweepSpec]:
    return {name: load_space(name) for name in available_spaces()}


@pytest.fixture(scope="module")
def trials(specs) -> dict[str, list[TrialConfig]]:
    return {name: expand(spec) for name, spec in specs.items()}


def test_every_shipped_space_loads(specs):
    assert available_spaces() == [
        "cifar10",
        "cifar10-methods",
        "cifar10-pretrain",
        "cifar10-published",
        "digits",
        "digits-methods",
        "digits-wide",
        "imagenet",
        "mnist",
    ]
    for name, spec in specs.items():
        assert isinstance(spec, SweepSpec)
        assert spec.name == name
        assert spec.description
        assert spec.smoke_fixed, f"{name} has no smoke overrides"


def test_cifar10_is_the_paper_grid(specs, trials):
    spec, ts = specs["cifar10"], trials["cifar10"]
    assert len(ts) == 644
    assert len({t.trial_id for t in ts}) == 644
    assert len({t for t in ts}) == 644
    adv = [t for t in ts if t.method == "smoothadv"]
    gauss = [t for t in ts if t.method == "gaussian"]
    assert len(adv) == 640 and len(gauss) == 4
    assert collections.Counter(t.attack for t in adv) == {"pgd": 320, "ddn": 320}
    assert {t.sigma for t in adv} == {0.12, 0.25, 0.5, 1.0}
    assert {t.epsilon for t in adv} == {0.25, 0.5, 1.0, 2.0}
    assert {t.steps for t in adv} == {2, 4, 6, 8, 10}
    assert {t.m_train for t in adv} == {1, 2, 4, 8}
    # every combination exactly once
    combos = {(t.sigma, t.epsilon, t.steps, t.m_train, t.attack) for t in adv}
    assert len(combos) == 640
    assert sorted(t.sigma for t in gauss) == [0.12, 0.25, 0.5, 1.0]
    for t in gauss:
        assert (t.attack, t.epsilon, t.steps, t.warmup_epochs) == (None, None, None, None)
        assert t.m_train == 1
    for t in ts:
        assert (t.dataset, t.arch, t.epochs) == ("cifar10", "cifar_resnet110", 150)
        assert (t.batch_size, t.lr, t.lr_step_size) == (256, 0.1, 50)
    assert all(t.ddn_gamma == 0.05 for t in adv if t.attack == "ddn")
    assert all(t.ddn_gamma is None for t in adv if t.attack == "pgd")
    assert spec.resources == Resources(cpu=2, gpu=0.25)
    c = spec.certify
    assert (c.n0, c.n, c.alpha, c.skip, c.max_points) == (100, 100_000, 0.001, 20, 500)
    assert c.sigma is None


def test_imagenet_pairs_attack_with_steps(trials):
    ts = trials["imagenet"]
    assert len(ts) == 30
    adv = [t for t in ts if t.method == "smoothadv"]
    assert len(adv) == 27
    assert {(t.attack, t.steps) for t in adv} == {("pgd", 1), ("ddn", 2)}
    assert collections.Counter(t.attack for t in adv) == {"pgd": 15, "ddn": 12}
    assert {t.epsilon for t in adv if t.attack == "pgd"} == {0.5, 1.0, 2.0, 4.0, 8.0}
    assert {t.epsilon for t in adv if t.attack == "ddn"} == {0.5, 1.0, 2.0, 4.0}
    assert {t.sigma for t in ts} == {0.25, 0.5, 1.0}
    assert all(t.m_train == 1 for t in ts)
    assert all((t.arch, t.epochs) == ("resnet50", 90) for t in ts)
    assert sorted(t.sigma for t in ts if t.method == "gaussian") == [0.25, 0.5, 1.0]


def test_digits_and_mnist_counts(trials):
    digits, mnist = trials["digits"], trials["mnist"]
    assert len(digits) == 34  # 2^5 SmoothAdv + 2 Gaussian
    assert collections.Counter(t.method for t in digits) == {"smoothadv": 32, "gaussian": 2}
    assert len(mnist) == 21  # 3 sigma x 3 eps x 2 attacks + 3 Gaussian
    assert collections.Counter(t.method for t in mnist) == {"smoothadv": 18, "gaussian": 3}
    assert {t.steps for t in mnist if t.method == "smoothadv"} == {4}
    assert {t.m_train for t in mnist} == {1, 2}


def test_expansion_order_is_deterministic_and_ids_stable(trials):
    ts = trials["cifar10"]
    assert ts[0].trial_id == PINNED_CIFAR10_FIRST_ID
    assert ts[0].replace(scale_input=True).trial_id == CIFAR10_FIRST_ID_BEFORE_ISSUE_26
    first = (ts[0].sigma, ts[0].epsilon, ts[0].steps, ts[0].m_train, ts[0].attack)
    assert first == (0.12, 0.25, 2, 1, "pgd")
    # the last axis varies fastest, grids come in file order
    assert (ts[1].attack, ts[1].m_train) == ("ddn", 1)
    assert (ts[2].attack, ts[2].m_train) == ("pgd", 2)
    last = ts[639]
    assert (last.sigma, last.epsilon, last.steps, last.m_train, last.attack) == (
        1.0,
        2.0,
        10,
        8,
        "ddn",
    )
    assert [t.method for t in ts[640:]] == ["gaussian"] * 4
    # the id is a hash of the resolved config, not of where it came from
    rebuilt = TrialConfig.from_dict(ts[0].to_dict())
    assert rebuilt.trial_id == PINNED_CIFAR10_FIRST_ID
    assert ts[0].replace(num_workers=7).trial_id == PINNED_CIFAR10_FIRST_ID  # environment only
    assert ts[0].replace(seed=1).trial_id != PINNED_CIFAR10_FIRST_ID
    for name in ("digits", "imagenet", "mnist"):
        again = expand(load_space(name))
        assert [t.trial_id for t in again] == [t.trial_id for t in trials[name]]
        assert again == trials[name]


def test_int_and_float_values_give_the_same_trial():
    a = TrialConfig(dataset="digits", sigma=1, epsilon=2)
    b = TrialConfig(dataset="digits", sigma=1.0, epsilon=2.0)
    assert a.trial_id == b.trial_id


def test_overrides_apply_to_every_trial_without_changing_ids(specs, trials):
    ts = expand(specs["digits"], {"data_dir": "/data", "num_workers": 3})
    assert all(t.data_dir == "/data" and t.num_workers == 3 for t in ts)
    assert [t.trial_id for t in ts] == [t.trial_id for t in trials["digits"]]


def _space(**over) -> dict:
    raw = {
        "fixed": {"dataset": "digits", "epochs": 2},
        "grids": [
            {"name": "adv", "fixed": {"method": "smoothadv"}, "axes": {"sigma": [0.25, 0.5]}},
            {
                "name": "gauss",
                "fixed": {"method": "gaussian", "m_train": 1},
                "axes": {"sigma": [0.25, 0.5], "epsilon": [0.25, 0.5, 1.0], "steps": [1, 2]},
            },
        ],
    }
    raw.update(over)
    return raw


def test_duplicates_from_crossing_an_axis_with_gaussian_are_removed():
    spec, problems = parse_spec("dup", _space())
    assert problems == []
    ts = expand(spec)
    # 2 smoothadv + 2 gaussian: the 12 gaussian combinations resolve to 2 trials
    assert collections.Counter(t.method for t in ts) == {"smoothadv": 2, "gaussian": 2}
    assert len({t.trial_id for t in ts}) == 4
    gauss = [t for t in ts if t.method == "gaussian"]
    assert [t.sigma for t in gauss] == [0.25, 0.5]  # first occurrence kept, in order
    assert all(t.epsilon is None and t.steps is None for t in gauss)


MALFORMED = """\
description: everything wrong at once
colour: blue
fixed:
  dataset: digits
  bogus_hparam: 3
grids:
  - name: adv
    fixed: {method: smoothadv}
    axes:
      sigma: [-1, 0.5]
      epsilon: []
      m_train: [1]
  - name: typed
    fixed: {method: gaussian, sigma: "abc"}
resources: {cpu: 1, gpu: -1}
certify: {n: 0}
smoke:
  fixed: {epochs: 1}
  typo: {n: 5}
"""


def test_malformed_space_reports_every_problem_at_once(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(MALFORMED)
    with pytest.raises(SpecError) as info:
        load_space(str(path))
    problems = info.value.problems
    text = "\n".join(problems)
    expected = [
        "unknown key 'colour'",
        "fixed: unknown hyperparameter 'bogus_hparam'",
        "grids[0].axes.epsilon is empty",
        "sigma must be > 0 (got -1)",
        "sigma must be float (got 'abc')",
        "certify.n must be an integer >= 1 (got 0)",
        "resources.",
        "gpu=-1",
        "smoke must be a mapping with keys fixed, certify",
    ]
    for fragment in expected:
        assert fragment in text, f"{fragment!r} missing from:\n{text}"
    assert all(p.startswith("broken.yaml: ") for p in problems)
    assert len(problems) == len(set(problems)), "a problem is reported twice"
    # the typed-grid problem names its grid
    assert any("grid 'typed'" in p and "sigma must be float" in p for p in problems)
    assert any("grid 'adv'" in p and "sigma must be > 0" in p for p in problems)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (["not", "a", "mapping"], "must be a mapping"),
        (_space(grids=[]), "grids must be a non-empty list"),
        (_space(grids=[{"name": "g", "axes": {"sigma": 0.5}}]), "axes.sigma must be a list"),
        (_space(grids=[{"name": "g", "axes": {"nope": [1]}}]), "unknown hyperparameter 'nope'"),
        (_space(grids=[{"name": "g", "extra": 1}]), "grids[0] must be a mapping with keys"),
        (_space(certify={"alpha": 0.7}), "alpha must be a number in (0, 0.5)"),
        (_space(certify={"sigma": -0.1}), "certify.sigma must be > 0"),
        (_space(certify={"n": "many"}), "certify.n must be int"),
        (_space(resources={"cpu": 0, "gpu": 0}), "not both zero"),
        (_space(resources={"tpu": 1}), "resources: unknown key 'tpu'"),
        (_space(smoke={"certify": {"nn": 3}}), "smoke.certify: unknown key 'nn'"),
        (_space(smoke={"fixed": {"train_subset": 0}}), "with smoke overrides:"),
        (
            _space(grids=[{"name": "g", "axes": {"a": [{"attack": "pgd", "stepz": 1}]}}]),
            "grids[0].axes.a: unknown hyperparameter 'stepz'",
        ),
    ],
)
def test_parse_spec_problems(raw, fragment):
    spec, problems = parse_spec("x", raw)
    assert spec is None
    assert any(fragment in p for p in problems), problems


def test_smoke_problem_not_duplicated_when_base_has_it():
    raw = _space(grids=[{"name": "g", "axes": {"sigma": [-1]}}])
    spec, problems = parse_spec("x", raw)
    assert spec is None
    assert problems == ["grid 'g': sigma must be > 0 (got -1)"]


def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "indent.yaml"
    path.write_text("fixed:\n  dataset: digits\n grids: []\n")
    with pytest.raises(SpecError) as info:
        load_space(str(path))
    [problem] = info.value.problems
    assert "malformed YAML" in problem
    assert "line 3" in problem
    assert str(path) in problem


def test_unknown_space_lists_the_available_ones(tmp_path):
    with pytest.raises(SpecError) as info:
        load_space("cifar100")
    [problem] = info.value.problems
    assert "unknown space 'cifar100'" in problem
    assert (
        "cifar10, cifar10-methods, cifar10-pretrain, cifar10-published, digits, digits-methods, "
        "digits-wide, imagenet, mnist" in problem
    )
    with pytest.raises(SpecError, match="search space file not found"):
        load_space(str(tmp_path / "missing.yaml"))


def test_a_directory_named_as_a_shipped_space_does_not_shadow_it(tmp_path):
    """With `--storage .` the experiment `digits` is the directory ./digits (tests run in
    tmp_path): `digits` still names the shipped space."""
    (tmp_path / "digits").mkdir()
    assert resolve_space_path("digits") == SPACES_DIR / "digits.yaml"


def test_a_user_yaml_path_works(tmp_path):
    path = tmp_path / "mine.yml"
    path.write_text(
        textwrap.dedent(
            """\
            fixed: {dataset: digits, epochs: 1}
            grids:
              - name: g
                fixed: {method: smoothadv}
                axes:
                  sigma: [0.25, 0.5, 1.0]
                  attack: [{attack: pgd, steps: 1}, {attack: ddn, steps: 3}]
            certify: {n: 500, max_points: 10}
            """
        )
    )
    spec = load_space(str(path))
    assert spec.name == "mine"
    assert spec.certify.n == 500 and spec.certify.max_points == 10 and spec.certify.n0 == 100
    assert spec.resources == Resources()
    ts = expand(spec)
    assert len(ts) == 6
    assert {(t.attack, t.steps) for t in ts} == {("pgd", 1), ("ddn", 3)}
    assert spec.smoked().name == "mine-smoke"


def test_expansion_problems_name_the_grid():
    spec, _ = parse_spec("ok", _space())
    assert expansion_problems(spec) == []
    bad = dataclasses.replace(spec, fixed={"dataset": "digits", "lr": -1})
    problems = expansion_problems(bad)
    assert problems == [
        "grid 'adv': lr must be > 0 or null (got -1)",  # null: the method's protocol
        "grid 'gauss': lr must be > 0 or null (got -1)",
    ]


# ------------------------------------------------------------------------------ --only
def test_parse_only():
    assert parse_only(None) == ({}, [])
    assert parse_only("") == ({}, [])
    sel, problems = parse_only("sigma=0.25, attack=pgd,train_subset=,amp=true")
    assert problems == []
    assert sel == {"sigma": 0.25, "attack": "pgd", "train_subset": None, "amp": True}
    sel, problems = parse_only("nosuchkey=1,sigma")
    assert sel == {}
    assert problems == [
        "--only: unknown hyperparameter 'nosuchkey' (e.g. method, sigma, epsilon, steps (T), "
        "m_train (m), attack, lam, eta, or any trial setting)",
        "--only: expected key=value, got 'sigma'",
    ]
    sel, problems = parse_only("sigma=[1")
    assert sel == {} and len(problems) == 1 and problems[0].startswith("--only sigma")


def test_select_slices_the_grid(trials):
    ts = trials["cifar10"]
    chosen, problems = select(ts, parse_only("sigma=0.25,attack=pgd")[0])
    assert problems == []
    assert len(chosen) == 80  # 4 eps x 5 T x 4 m, the Gaussian baseline has no attack
    assert all(t.sigma == 0.25 and t.attack == "pgd" for t in chosen)
    assert len(select(ts, {"sigma": 0.25})[0]) == 161
    assert len(select(ts, {"method": "gaussian"})[0]) == 4
    assert len(select(ts, {"attack": None})[0]) == 4
    assert len(select(ts, {"sigma": 1})[0]) == 161  # an int matches the float
    for off in ("off", False):  # YAML reads --only amp=off as false
        assert len(select(ts, {"amp": off})[0]) == len(ts)
    assert select(ts, parse_only("amp=true")[0])[1] == [
        "--only amp=True matches no trial (amp values: off)"
    ]
    assert select(ts, {})[0] == ts
    chosen, problems = select(ts, {"sigma": 0.3, "attack": "pgd"})
    assert chosen == []
    assert len(problems) == 1
    assert problems[0].startswith("--only sigma=0.3 matches no trial")
    assert "0.12, 0.25, 0.5, 1.0" in problems[0]


# ------------------------------------------------------------------------------ smoke, cert_id
def test_smoked_applies_overrides_and_renames():
    raw = _space(
        certify={"n": 5000, "skip": 3, "alpha": 0.01},
        smoke={"fixed": {"epochs": 1, "train_subset": 64}, "certify": {"n": 50, "max_points": 4}},
    )
    spec, problems = parse_spec("tiny", raw)
    assert problems == []
    smoke = spec.smoked()
    assert smoke.name == "tiny-smoke"
    assert smoke.fixed == {"dataset": "digits", "epochs": 1, "train_subset": 64}
    c = smoke.certify
    assert (c.n, c.max_points, c.skip, c.alpha, c.n0) == (50, 4, 3, 0.01, 100)
    assert smoke.smoke_fixed == {} and smoke.smoke_certify == {}
    assert smoke.smoked().fixed == smoke.fixed  # applying twice changes nothing more
    ts, base = expand(smoke), expand(spec)
    assert len(ts) == len(base) == 4
    assert all(t.epochs == 1 and t.train_subset == 64 for t in ts)
    assert not {t.trial_id for t in ts} & {t.trial_id for t in base}
    # the original is untouched (frozen)
    assert spec.name == "tiny" and spec.certify.n == 5000 and spec.fixed["epochs"] == 2


def test_shipped_smoke_blocks_are_applied(specs, trials):
    for name, spec in specs.items():
        block = yaml.safe_load((SPACES_DIR / f"{name}.yaml").read_text())["smoke"]
        smoke = spec.smoked()
        assert smoke.name == f"{name}-smoke"
        for key, value in block["fixed"].items():
            assert smoke.fixed[key] == value
        for key, value in block["certify"].items():
            assert getattr(smoke.certify, key) == value
        if name == "digits":
            ts = expand(smoke)
            assert len(ts) == len(trials[name])
            assert all(t.epochs == 1 for t in ts)


def test_cert_id_changes_with_settings():
    base = CertifySpec()
    assert base.cert_id == "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500"
    variants = [
        CertifySpec(n=1000),
        CertifySpec(alpha=0.01),
        CertifySpec(sigma=0.5),
        CertifySpec(n0=64),
        CertifySpec(skip=10),
        CertifySpec(max_points=None),
    ]
    ids = [v.cert_id for v in variants]
    assert base.cert_id not in ids
    assert len(set(ids)) == len(ids)
    assert "sigma-0.5_" in CertifySpec(sigma=0.5).cert_id
    assert "max-all" in CertifySpec(max_points=None).cert_id
    # batch and shard sizes change how, not what, is computed
    assert CertifySpec(batch_size=7, shard_size=3).cert_id == base.cert_id


def test_spec_to_json_round_trips(specs):
    import json

    doc = json.loads(specs["imagenet"].to_json())
    assert doc["name"] == "imagenet"
    assert doc["certify"]["n"] == 100_000
    assert [g["name"] for g in doc["grids"]] == ["pgd", "ddn", "gaussian"]


# ------------------------------------------------------------------------ bounded reading
HEADER = "fixed: {dataset: digits, method: gaussian, epochs: 1}\n"


def _laughs(levels: int) -> str:
    """A billion laughs: each anchor a list of ten aliases of the one before (10^levels)."""
    lines = ['l0: &l0 ["ha"]'] + [
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)
    ]
    return "x-anchors:\n" + "".join(f"  {line}\n" for line in lines)


BOUNDED = {
    "billion laughs in an axis": (
        HEADER + _laughs(9) + "grids:\n  - name: g\n    axes: {sigma: *l9}\n",
        "line 8, column 7: more than 100,000 values once its aliases are expanded",  # at l5
    ),
    "nested 10,000 deep": (
        HEADER + "grids:\n  - name: g\n    axes: {sigma: " + "[" * 10_000 + "]" * 10_000 + "}\n",
        "nested deeper than 32 levels",
    ),
    "nested deep through aliases": (
        HEADER
        + "x:\n  a0: &a0 [1]\n"
        + "".join(f"  a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 40))
        + "grids:\n  - name: g\n    axes: {sigma: *a39}\n",
        "nested deeper than 32 levels through its aliases",
    ),
    "recursive alias": (
        HEADER + "grids:\n  - name: g\n    axes: {sigma: &s [0.25, *s]}\n",
        "an alias inside the value it names (a recursive alias)",
    ),
}


@pytest.mark.parametrize("kind", BOUNDED)
def test_yaml_that_would_blow_up_is_refused_while_it_is_read(tmp_path, kind):
    text, why = BOUNDED[kind]
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_space(str(path))
    [problem] = info.value.problems
    assert problem.startswith(f"{path}: refused at line ") and why in problem, problem
    assert problem.endswith("a space is a few mappings and lists of values")


def test_anchors_and_merge_keys_still_read(tmp_path):
    path = tmp_path / "anchored.yaml"
    path.write_text(
        "fixed: &base {dataset: digits, method: gaussian, epochs: 1}\n"
        "grids:\n"
        "  - name: a\n    axes: {sigma: &sigmas [0.25, 0.5]}\n"
        "  - name: b\n    fixed: {<<: *base, epochs: 2}\n    axes: {sigma: *sigmas}\n"
    )
    trials = expand(load_space(str(path)))
    assert [(t.sigma, t.epochs) for t in trials] == [(0.25, 1), (0.5, 1), (0.25, 2), (0.5, 2)]


SEVEN_AXES = ("batch_size", "seed", "steps", "m_train", "epochs", "train_subset", "eval_subset")
TEN_VALUES = ", ".join(str(v) for v in range(1, 11))
SEVEN_BY_TEN = HEADER + "grids:\n  - name: g\n    axes:\n"
SEVEN_BY_TEN += "".join(f"      {axis}: [{TEN_VALUES}]\n" for axis in SEVEN_AXES)


def test_a_grid_over_the_limit_is_refused_before_it_is_expanded(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sweeper.cli import app
    from sweeper.plan import grid

    def no_expanding(*args, **kwargs):
        raise AssertionError("expanded")

    space = tmp_path / "huge.yaml"
    space.write_text(SEVEN_BY_TEN)
    monkeypatch.setattr(grid, "_raw_trials", no_expanding)
    args = ["run", "grid", str(space), "--dry-run", "--storage", str(tmp_path / "store")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr == (
        "error: huge.yaml: the grids describe 10,000,000 trials (10 x 10 x 10 x 10 x 10 x 10 x 10 "
        "values of their axes), more than --max-trials 20,000: narrow the axes, or pass "
        "--max-trials 10000000 if the sweep is meant to be this large\n"
    )
    assert not (tmp_path / "store").exists()


def test_max_trials_raises_the_limit(tmp_path):
    from typer.testing import CliRunner

    from sweeper.cli import app

    space = tmp_path / "staged.yaml"
    space.write_text(
        HEADER + "grids:\n  - name: a\n    axes: {sigma: [0.25, 0.5, 1.0], seed: [1, 2]}\n"
        "  - name: b\n    parent: a\n    inherit: [sigma]\n    axes: {epochs: [2, 3]}\n"
    )
    spec = load_space(str(space))
    assert trial_count(spec) == 6 + 6 * 2 == len(expand(spec))
    with pytest.raises(SpecError, match=r"the grids describe 18 trials .* --max-trials 17: "):
        load_space(str(space), max_trials=17)
    args = ["run", "grid", str(space), "--dry-run", "--storage", str(tmp_path / "store")]
    for extra, code in (["--max-trials", "17"], 2), (["--max-trials", "18"], 0):
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code == code, result.output


def test_only_names_a_certification_setting_for_the_reads_and_no_trial(trials):
    """`cert_id=` (kept as written) and `strategy=` (envelope or full) slice the results;
    selecting trials with them is a problem, not a silent no-op (issue 39 §4)."""
    sel, problems = parse_only("cert_id=sigma-train_n0-100_n-1e5,strategy=envelope,sigma=0.25")
    assert problems == []
    assert sel == {"cert_id": "sigma-train_n0-100_n-1e5", "strategy": "envelope", "sigma": 0.25}
    assert parse_only("strategy=both")[1] == ["--only strategy=both: expected envelope or full"]
    chosen, problems = select(trials["cifar10"], sel)
    assert [p.split(" selects")[0] for p in problems] == ["--only cert_id=", "--only strategy="]
    assert len(chosen) == 161  # the trials' own keys still select
