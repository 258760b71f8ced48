"""A trial is a `TrialConfig` from the space's first read to the trainable's first line and
back to the Parquet columns (issue 41 item 2): it crosses the Ray boundary as one
`to_dict`/`from_dict` pair (`TuneTrials.hand`, `trainables.tune_trial`), the driver never reads
Tune's copy back, and every other `from_dict` reads a file."""

from __future__ import annotations

import ast
import copy
import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import certified_rows
import pyarrow as pa
import pytest

from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results.certify_rows import SCHEMA, shard_table
from sweeper.results.stage_table import trial_parts
from sweeper.results.sweep_file import sweep_trials, trials_doc
from sweeper.run.stage_searcher import StageSearcher
from sweeper.run.tune_names import MAX_DIRNAME, TuneTrials, readable
from trainables.kernel.config import ENVIRONMENT_FIELDS, TrialConfig
from trainables.kernel.errors import ConfigError
from trainables.kernel.stage_settings import CertifySpec

ROOT = Path(__file__).resolve().parents[1]

# Where a dict becomes a `TrialConfig` again, and why: the space's grid (the first read), an
# imported log's path (the importer's first read), the Ray boundary on the worker (the
# trainable's first line), and files: trial.json or an import record, sweep.json, the
# checkpoint (loaded, and compared on resume).
FROM_DICT = {
    "sweeper/plan/grid.py": 1,
    "sweeper/ingest/importer.py": 1,
    "sweeper/results/trial_records.py": 1,
    "sweeper/results/sweep_file.py": 1,
    "trainables/tune_trial.py": 1,
    "trainables/checkpoint.py": 1,
    "trainables/train_state.py": 1,
}


def _calls(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text())
    return sum(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
        for n in ast.walk(tree)
    )


def test_a_config_is_read_back_from_a_dict_only_where_one_crosses_a_boundary():
    found = {
        str(p.relative_to(ROOT)): count
        for package in ("sweeper", "trainables")
        for p in sorted((ROOT / package).rglob("*.py"))
        if (count := _calls(p, "from_dict"))
    }
    assert found == FROM_DICT


@pytest.fixture(scope="module")
def trials() -> list[TrialConfig]:
    return expand(load_space("digits"))


def test_tune_is_handed_a_dict_and_the_driver_keeps_the_config(trials):
    handed = TuneTrials({"cpus_per_trial": 2, "fault": ""})
    searcher = StageSearcher(trials, set(), handed)
    config = searcher.suggest("tune-1")
    assert config == {"cpus_per_trial": 2, "fault": "", "trial": trials[0].to_dict()}
    # the trainable's first line: the other half of the one pair at the boundary
    assert TrialConfig.from_dict(config["trial"]) == trials[0]
    # Tune's trial, its copy of the dict spoiled: the driver reads the config it handed over
    tune_trial = SimpleNamespace(trial_id="tune-1", config={"trial": {"sigma": "spoiled"}})
    assert handed.of(tune_trial) is trials[0]
    assert handed.name(tune_trial) == trials[0].trial_id
    dirname = handed.dirname(tune_trial)
    assert dirname == f"{trials[0].trial_id}_{readable(trials[0])}"[:MAX_DIRNAME]
    with pytest.raises(KeyError):
        handed.of(SimpleNamespace(trial_id="never-suggested", config=config))


def test_tunes_copies_of_the_names_read_the_live_record(trials):
    """Tune deep-copies its spec (the name creators among it) for each trial it makes, after
    the searcher handed the trial over: the copy reads the live record. Its state on disk (a
    pickle) holds no trials."""
    handed = TuneTrials({"fault": ""})
    spec = copy.deepcopy({"trial_name_creator": handed.name})
    handed.hand("t", trials[0])
    assert spec["trial_name_creator"](SimpleNamespace(trial_id="t")) == trials[0].trial_id
    stored = pickle.loads(pickle.dumps(handed))
    assert stored.configs == {} and stored.constants == {"fault": ""}
    assert handed.configs == {"t": trials[0]}


def test_sweep_json_writes_and_reads_its_trials_in_one_module(trials):
    doc = json.loads(json.dumps({"trials": trials_doc(trials)}))
    assert sweep_trials(doc) == trials
    assert [t.trial_id for t in sweep_trials(doc)] == [t.trial_id for t in trials]
    doc["trials"].insert(1, {"sigma": -1.0})
    with pytest.raises(ConfigError):
        sweep_trials(doc)
    assert sweep_trials(doc, lenient=True) == trials  # what declares no trial is left out


def test_the_parquet_columns_and_footer_come_from_one_to_dict(trials):
    cfg = trials[0]
    identity, config = trial_parts(cfg)
    assert config == cfg.to_dict()
    assert set(identity) == set(config) - ENVIRONMENT_FIELDS and "data_dir" not in identity
    spec = CertifySpec(n0=10, n=100, skip=2, max_points=2)
    cols = certified_rows.columns(spec, cfg.sigma, [0, 2], [90, 95], [1, 2])
    constants = {"smoothing": "fixed", "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    table = shard_table(cfg, "exp", spec.cert_id, constants, cols, {"shard": "0/1"})
    assert table.schema.equals(SCHEMA)
    footer = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert json.loads(footer["sweeper.config"]) == cfg.to_dict()
    assert footer["sweeper.shard"] == "0/1"
    assert TrialConfig.from_dict(json.loads(footer["sweeper.config"])).trial_id == cfg.trial_id
    row = table.slice(0, 1).to_pylist()[0]
    assert {k: row[k] for k in identity} == identity
    assert isinstance(table, pa.Table) and table.column("trial_id")[0].as_py() == cfg.trial_id
