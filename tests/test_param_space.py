"""`Sweep(param_space={...})` (issue 41 §3): a space given as a dict, with a space file's
keys, is read by the same `parse_spec` as the file: the same trials (the same trial ids), the
same problems in the same words, the same resume and the same conflict; a space of the wrong
type is one `SpaceTypeError` (a `PlanError` and a `TypeError`) when the `Sweep` is made."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
import yaml

from sweeper import Sweep
from sweeper.api.space_arg import SpaceTypeError
from sweeper.plan.param_space import ParamSpace, hashed_name, load
from sweeper.plan.spaces import SPACES_DIR, available_spaces, load_space
from sweeper.plan.sweep_plan import PlanError
from sweeper.results.sweep_file import SETTINGS, write_sweep
from sweeper.run.launch_options import LaunchOptions

TINY = """
fixed: {dataset: digits, epochs: 1, batch_size: 64, train_subset: 64, lr: 0.05, warmup_epochs: 0}
grids:
  - name: g
    fixed: {method: gaussian}
    axes: {sigma: [0.25]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 32, alpha: 0.01, skip: 45, max_points: null, batch_size: 32, shard_size: 10}
"""


def shipped(name: str) -> dict:
    """A shipped space's file as a dict, as `yaml.safe_load` reads it."""
    return yaml.safe_load((SPACES_DIR / f"{name}.yaml").read_text())


def tiny(**changes) -> dict:
    return {**yaml.safe_load(TINY), **changes}


def ids(trials) -> list[str]:
    return [t.trial_id for t in trials]


@pytest.mark.parametrize("name", available_spaces())
def test_a_dict_of_every_shipped_space_is_its_spec(name):
    spec = load(ParamSpace(shipped(name)))
    assert spec.name == hashed_name(spec) and spec.name.startswith("space-")
    assert dataclasses.replace(spec, name=name) == load_space(name)


@pytest.mark.parametrize("smoke", [False, True])
def test_a_dict_of_a_shipped_space_plans_its_trials(tmp_path, smoke):
    storage = str(tmp_path / "s")
    of_dict = Sweep(param_space=shipped("digits"), storage=storage, smoke=smoke).plan()
    of_file = Sweep("digits", storage=storage, smoke=smoke).plan()
    assert ids(of_dict.plan.all_trials) == ids(of_file.plan.all_trials)
    assert len(of_dict.trials) == 34
    assert of_dict.cost == of_file.cost
    name = hashed_name(load_space("digits"))
    assert of_dict.plan.exp.name == (f"{name}-smoke" if smoke else name)
    assert of_file.plan.exp.name == ("digits-smoke" if smoke else "digits")
    assert not Path(storage).exists()  # a plan writes nothing
    # a dict in space's place is the same param_space
    in_place = Sweep(shipped("digits"), storage=storage, smoke=smoke).plan()
    assert ids(in_place.trials) == ids(of_file.trials)


def test_the_name_is_the_dicts_or_a_hash_of_its_trials(tmp_path):
    storage = str(tmp_path)
    name = Sweep(param_space=tiny(), storage=storage).exp().name
    assert name == Sweep(param_space=tiny(), storage=storage).exp().name  # stable
    reordered = tiny(resources={"gpu": 0, "cpu": 1}, certify={"n": 64})  # the same trials
    assert Sweep(param_space=reordered, storage=storage).exp().name == name
    other = tiny(grids=[{"fixed": {"method": "gaussian"}, "axes": {"sigma": [0.5]}}])
    assert Sweep(param_space=other, storage=storage).exp().name != name
    assert Sweep(param_space=tiny(name="mine"), storage=storage).exp().name == "mine"
    smoked = Sweep(param_space=tiny(name="mine"), storage=storage, smoke=True)
    assert smoked.plan().plan.exp.name == "mine-smoke"
    named = Sweep(param_space=tiny(name="mine"), storage=storage, experiment="exp")
    assert named.plan().plan.exp.name == "exp"


BAD = """
fixed: {dataset: digits, epochs: 1, colour: red}
grids:
  - name: g
    fixed: {method: gaussian}
    axes: {sigma: [0.25, -0.5]}
certify: {n0: 8, n: 32, alpha: 0.01, sharding: 3}
speed: fast
"""


def test_a_dict_has_every_problem_the_file_has_in_its_words(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(BAD))
    with pytest.raises(PlanError) as from_file:
        Sweep(str(path), storage=str(tmp_path)).plan()
    with pytest.raises(PlanError) as from_dict:
        Sweep(param_space=yaml.safe_load(BAD), storage=str(tmp_path)).plan()
    file_lines = [p.removeprefix("bad.yaml: ") for p in from_file.value.problems]
    dict_lines = [p.removeprefix("param_space: ") for p in from_dict.value.problems]
    assert dict_lines == file_lines and len(dict_lines) >= 4
    assert all(p.startswith("param_space: ") for p in from_dict.value.problems)
    assert any("unknown key 'speed'" in p for p in dict_lines)
    assert any("'colour'" in p for p in dict_lines)
    assert any("sharding" in p for p in dict_lines)
    assert any("sigma" in p for p in dict_lines)


def test_a_bad_name_is_one_more_problem(tmp_path):
    with pytest.raises(PlanError) as e:
        Sweep(param_space={**yaml.safe_load(BAD), "name": 3}, storage=str(tmp_path)).plan()
    assert "param_space: name must be a non-empty string" in e.value.problems[0]
    assert len(e.value.problems) > 4
    with pytest.raises(PlanError, match="the space name"):
        Sweep(param_space=tiny(name="a/b"), storage=str(tmp_path)).plan()


@pytest.mark.parametrize(
    ("args", "kwargs", "said"),
    [
        ((42,), {}, "Sweep's space is int 42: pass a shipped space's name"),
        ((["a"],), {}, "Sweep's space is list ['a']: pass"),
        ((b"digits",), {}, "Sweep's space is bytes"),
        (("digits",), {"param_space": {}}, "both a space (str 'digits') and param_space"),
        (({"grids": []},), {"param_space": {}}, "both a space (dict"),
        ((), {"param_space": 42}, "Sweep's param_space is int 42: pass the space as a dict"),
        ((), {"param_space": ["digits"]}, "Sweep's param_space is list"),
        ((), {"param_space": {1: {}}}, "param_space has a key that is not a string, int 1"),
        (
            (),
            {"param_space": {"grids": [{"axes": {0.25: [1]}}]}},
            "param_space.grids[0].axes has a key that is not a string, float 0.25: write it as "
            "the string '0.25'",
        ),
    ],
)
def test_a_space_of_the_wrong_type_is_one_clear_error(args, kwargs, said):
    with pytest.raises(SpaceTypeError) as e:
        Sweep(*args, **kwargs)
    assert isinstance(e.value, PlanError) and isinstance(e.value, TypeError)
    assert len(e.value.problems) == 1 and "\n" not in str(e.value)
    assert said in str(e.value)


def test_a_dict_inside_itself_is_refused():
    looped: dict = {"fixed": {}}
    looped["fixed"]["again"] = looped
    with pytest.raises(SpaceTypeError, match="nested deeper than 32 levels"):
        Sweep(param_space=looped)


def test_a_path_is_a_space_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(TINY)
    assert Sweep(path, storage=str(tmp_path)).plan().plan.exp.name == "mine"


def test_the_sweep_keeps_the_dict_as_given(tmp_path):
    given = tiny()
    sweep = Sweep(param_space=given, storage=str(tmp_path))
    before = ids(sweep.plan().trials)
    given["grids"][0]["axes"]["sigma"].append(0.5)
    given["fixed"]["epochs"] = 3
    assert ids(sweep.plan().trials) == before


def record_run(plan) -> None:
    """sweep.json as a run writes it (`sweep_run.train_and_certify`)."""
    write_sweep(
        plan.exp,
        {
            "space": json.loads(plan.spec.to_json()),
            "trials": [t.to_dict() for t in plan.all_trials],
            SETTINGS: [plan.spec.certify.setting_id],
        },
    )


def test_the_same_dict_resumes_and_another_is_the_files_conflict(tmp_path):
    storage = str(tmp_path / "s")
    record_run(Sweep(param_space=tiny(name="mine"), storage=storage).plan().plan)
    again = Sweep(param_space=tiny(name="mine"), storage=storage).plan()
    assert ids(again.trials) == ids(Sweep(param_space=tiny(), storage=storage).plan().trials)
    other = tiny(fixed={**tiny()["fixed"], "epochs": 2})
    with pytest.raises(PlanError) as from_dict:
        Sweep(param_space={**other, "name": "mine"}, storage=storage).plan()
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(other))
    with pytest.raises(PlanError) as from_file:
        Sweep(str(path), storage=storage).plan()
    assert from_dict.value.problems == from_file.value.problems
    assert "holds a different sweep (epochs 1 there, 2 here)" in from_dict.value.problems[0]


def test_certifying_a_dict_never_run_says_how_to_run_it(tmp_path):
    with pytest.raises(PlanError, match=r"run `Sweep\(param_space=\.\.\.\)\.run\(\)` first"):
        Sweep(param_space=tiny(), storage=str(tmp_path)).certify_plan()


@pytest.mark.e2e
def test_a_dict_runs_resumes_certifies_and_reads(ray_session, tmp_path):
    sweep = Sweep(param_space=tiny(), storage=str(tmp_path / "s"))
    ran = sweep.run(options=LaunchOptions(cpu_only=True))
    assert ran.outcome is not None and not ran.outcome.failed
    assert not ran.outcome.certify_failures
    assert ran.plan.exp.name == hashed_name(load(ParamSpace(tiny())))
    recorded = json.loads(Path(ran.plan.exp.sweep_json).read_text())
    assert recorded["space"]["name"] == ran.plan.exp.name
    assert sweep.run(options=LaunchOptions(cpu_only=True)).outcome is None  # resumed: done
    assert sweep.status().summary.states["finished"] == 1
    assert sweep.certify_plan().ready == ran.trials
    table = sweep.envelope([0.0])
    assert table["certified_accuracy"].tolist()[0] > 0
