"""What sweep.json declares (`sweep_file.declared`): the trials its configs hash to, the
certification settings of its space and those `sweeper certify` / `sweeper import` record;
a sweep.json that declares no settings checks none, an import's counts its imported ones."""

from __future__ import annotations

import dataclasses
import json

from sweeper.plan.spaces import load_space
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import declared, record_settings, write_sweep
from trainables.kernel.config import TrialConfig

A = TrialConfig(dataset="digits", method="gaussian", sigma=0.5, m_train=1, epochs=1)
IMPORTED = "imported-sigma-0.5-n-100000-alpha-0.001"


def test_a_sweeps_space_declares_its_certify_settings_and_certify_records_more(tmp_path):
    spec = load_space("digits").smoked()
    exp = Experiment(str(tmp_path), "e")
    write_sweep(exp, {"space": json.loads(spec.to_json()), "trials": [A.to_dict()]})
    sweep = declared(exp)
    assert sweep.trials == {A.trial_id} and sweep.settings == {spec.certify.cert_id}
    assert sweep.trial_problem(A.trial_id) is None
    assert "sweep.json lists no trial" in (sweep.trial_problem(A.replace(seed=3).trial_id) or "")
    other = dataclasses.replace(spec.certify, strategy="envelope").cert_id
    assert sweep.setting_problem(other) is not None
    assert sweep.setting_problem(IMPORTED) is not None  # into a sweep: only if recorded
    record_settings(exp, [other, IMPORTED])
    assert declared(exp).settings == {spec.certify.cert_id, other, IMPORTED}


def test_without_declared_settings_none_is_checked_and_imports_count_theirs(tmp_path):
    exp = Experiment(str(tmp_path), "e")
    assert declared(exp).trials is None  # no sweep.json: nothing to check against
    write_sweep(exp, {"space": {"name": "hand"}, "trials": [A.to_dict()]})
    record_settings(exp, ["sigma-train_n0-10_n-100_alpha-0.01_skip-1_max-all"])
    assert declared(exp).settings is None  # hand-made: stays unchecked
    write_sweep(exp, {"space": None, "trials": [], "imported": True, "certify_settings": []})
    assert declared(exp).setting_problem(IMPORTED) is None
    assert declared(exp).setting_problem("sigma-100_n0-10_n-100_alpha-0.01_skip-1_max-all")
