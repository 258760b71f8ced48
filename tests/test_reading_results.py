"""Reading results outside sweeper: the storage's globs are one table each, and the README's
pandas, DuckDB and polars recipes give `sweeper envelope`'s certified accuracies on a DDRS
experiment (built without Ray: real shards, the real memory pass, a legacy memory file
migrated by `sweeper compact`)."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.results import Experiment, load_results
from sweeper.results.envelope import envelope
from sweeper.results.rows import MEMORY_SCHEMA, SCHEMA, shard_table
from sweeper.results.storage import MEMORY
from sweeper.run import compaction
from sweeper.run.certify_stage import CERTIFY
from trainables.config import TrialConfig
from trainables.config_parts import DDRSSettings
from trainables.trial_status import write_status

README = Path(__file__).resolve().parents[1] / "README.md"
FIXED = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None)
DDRS = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None, ddrs=DDRSSettings())
A = TrialConfig(dataset="digits", method="gaussian", sigma=0.5, m_train=1, epochs=1)
B = A.replace(sigma=0.25)
C = A.replace(sigma=1.0)
RADII = [0.0, 0.25, 0.5, 1.0, 1.5, 1.7]


def _shard(exp, cfg, spec, k, count, idx, predict, label, radius, sigma_cert, smoothing):
    cols = {"idx": idx, "label": label, "predict": predict, "count": [990] * len(idx),
            "p_lower": [0.99] * len(idx), "radius": radius, "sigma_cert": sigma_cert,
            "correct": [p == y and p != -1 for p, y in zip(predict, label, strict=True)],
            "time_s": [0.1] * len(idx)}  # fmt: skip
    constants = {"smoothing": smoothing, "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    table = shard_table(cfg, exp.name, spec.cert_id, constants, cols, {"config": cfg.to_dict()})
    path = Path(exp.shard_path(cfg.trial_id, spec.cert_id, k, count))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


@pytest.fixture
def ddrs_experiment(tmp_path, monkeypatch) -> Experiment:
    """results/digits: model A certified with DDRS on digits test points 0-4 (labels 2, 0, 4,
    9, 4) whose balls overlap, so the memory pass changes points 1 and 4 (compacted with the
    real pass); model B at fixed σ (compacted); model C certified with DDRS before compaction
    existed (a shard and its memory.parquet, left for `sweeper compact`)."""
    monkeypatch.chdir(tmp_path)
    exp = Experiment("results", "digits")
    write_status(exp.trial_dir(A.trial_id), A, "finished", 1, {})  # the memory pass reads it
    labels = [2, 0, 4, 9, 4]
    sigmas = [1.0, 1.1, 0.9, 1.0, 1.2]
    _shard(exp, A, DDRS, 0, 2, [0, 1, 2], [2, 0, 4], labels[:3], [1.2, 1.9, 1.5], sigmas[:3],
           "data-dependent")  # fmt: skip
    _shard(exp, A, DDRS, 1, 2, [3, 4], [-1, 9], labels[3:], [0.0, 0.8], sigmas[3:], "data-dependent")
    compaction.compact(exp, CERTIFY, A.trial_id, DDRS, 2)
    _shard(exp, B, FIXED, 0, 1, [0, 1, 2, 3, 4], [2, 0, 1, 9, -1], labels, [0.3, 0.6, 0.2, 0.1, 0.0],
           [0.25] * 5, "fixed")  # fmt: skip
    compaction.compact(exp, CERTIFY, B.trial_id, FIXED, 1)
    _shard(exp, C, DDRS, 0, 1, [0, 1, 2, 3, 4], [2, 0, 4, 9, 4], labels, [1.6, 1.6, 1.6, 1.6, 1.6],
           [1.0] * 5, "data-dependent")  # fmt: skip
    memory = pa.Table.from_pydict(
        {"trial_id": [C.trial_id] * 5, "cert_id": [DDRS.cert_id] * 5, "idx": [0, 1, 2, 3, 4],
         "predict_memory": [2, 0, -1, 9, 4], "radius_memory": [1.6, 0.4, 0.0, 1.6, 1.0],
         "correct_memory": [True, True, False, True, True],
         "memory_changed": [False, True, True, False, True]}, schema=MEMORY_SCHEMA,
    )  # fmt: skip
    pq.write_table(memory, Path(exp.setting_dir("certify", C.trial_id, DDRS.cert_id)) / MEMORY)
    return exp


def _envelope(exp: Experiment) -> list[float]:
    results = load_results(exp)
    assert not results.invalid and results.frame["sound"].all()
    return envelope(results.frame, RADII)["certified_accuracy"].round(9).tolist()


def test_each_kind_of_file_is_its_own_glob_of_one_schema(ddrs_experiment):
    exp = ddrs_experiment
    assert exp.glob() == str(Path(exp.root, "certify", "*", "*", "compacted-of-*.parquet"))
    compacted, shards, memory = (sorted(glob.glob(exp.glob("certify", kind)))
                                 for kind in ("compacted", "shard", "memory"))  # fmt: skip
    assert [Path(p).parts[-3] for p in compacted] == sorted([A.trial_id, B.trial_id])
    assert [Path(p).name for p in shards] == ["shard-00000-of-00001.parquet"]  # model C's
    assert [Path(p).name for p in memory] == [MEMORY]
    for path in compacted + shards:
        assert pq.read_schema(path).remove_metadata().equals(SCHEMA)
    assert pq.read_schema(memory[0]).remove_metadata().equals(MEMORY_SCHEMA)
    assert exp.glob("empirical", "shard").endswith(str(Path("empirical", "*", "*", "shard-*-of-*.parquet")))


def test_sweeper_compact_migrates_the_legacy_memory_file_and_says_so(ddrs_experiment):
    exp = ddrs_experiment
    before = _envelope(exp)  # the reader takes the legacy memory file where it is
    result = CliRunner().invoke(app, ["compact", "--storage", "results", "--experiment", "digits"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "certify: compacted 1 models (1 with a legacy DDRS memory.parquet folded in and "
        "deleted), 0 not complete; the cache holds 3 models",
        "empirical: compacted 0 models, 0 not complete; the cache holds 0 models",
    ]
    assert glob.glob(exp.glob("certify", "memory")) == glob.glob(exp.glob("certify", "shard")) == []
    assert len(glob.glob(exp.glob())) == 3
    assert _envelope(exp) == before


def _recipes() -> dict[str, str]:
    """The README's "Reading results" code blocks, by the library each imports."""
    text = README.read_text()
    section = text[text.index("## Reading results") :]
    section = section[: section.index("\n## ", 3)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    found = [(re.search(r"^import (pandas|duckdb|polars)\b", b, re.M), b) for b in blocks]
    return {m[1]: b for m, b in found if m}


def _run(code: str, r: float, capsys) -> dict:
    code, replaced = re.subn(r"^r = 0\.5  #", f"r = {r!r}  #", code, flags=re.M)
    assert replaced == 1
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    capsys.readouterr()
    return namespace


def _best(library: str, namespace: dict) -> float:
    certified = namespace["certified"]
    if library == "pandas":
        return float(certified.max())
    if library == "duckdb":
        return float(certified["accuracy"].iloc[0])
    return float(certified["accuracy"].max())


@pytest.mark.parametrize("library", ["pandas", "duckdb", "polars"])
def test_the_readme_recipes_give_the_envelope_of_a_ddrs_experiment(ddrs_experiment, library, capsys):
    pytest.importorskip(library)
    exp = ddrs_experiment
    assert CliRunner().invoke(app, ["compact", "--storage", "results", "--experiment", "digits"]).exit_code == 0
    expected = _envelope(exp)
    # The adjusted rows matter: read from the Monte-Carlo certificates (*_raw) the envelope
    # would be [1, 1, 1, 1, 1, 0.2] (C right everywhere with radius 1.6, A's 1.9 at point 1).
    assert expected == pytest.approx([0.8, 0.8, 0.6, 0.6, 0.4, 0.0])
    code = _recipes()[library]
    got = [_best(library, _run(code, r, capsys)) for r in RADII]
    assert np.round(got, 9).tolist() == expected


def test_the_python_api_in_the_readme_is_the_envelope(ddrs_experiment, capsys):
    code = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
                if "from sweeper.results import Experiment, load_results" in b)  # fmt: skip
    exec(compile(code, "README.md", "exec"), namespace := {})
    assert "certified_accuracy" in capsys.readouterr().out
    assert namespace["frame"]["sound"].all() and len(namespace["frame"]) == 15


def test_a_ddrs_models_largest_radius_is_at_its_largest_per_point_sigma(ddrs_experiment):
    from sweeper.results.envelope import max_radii, model_table
    from sweeper.results.rows import max_radius

    frame = load_results(ddrs_experiment).frame
    reach = dict(zip(model_table(frame)["trial_id"], max_radii(frame), strict=True))
    assert reach[A.trial_id] == pytest.approx(max_radius(1.2, 1000, 0.001))  # σ_x up to 1.2
    assert reach[B.trial_id] == pytest.approx(max_radius(0.25, 1000, 0.001))
    assert reach[C.trial_id] == pytest.approx(max_radius(1.0, 1000, 0.001))
