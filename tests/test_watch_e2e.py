"""A tiny real sweep as a user runs it, output redirected to a file: no escape codes, one plain
line per event; Ray Tune's TensorBoard event files and MLflow runs (a local file: store) hold
every trial's per-epoch curves; a corrupt checkpoint gives one grouped failure line, `status`
names it, and `--only trial_id=... --retrain` trains that trial again with the old checkpoint
moved aside."""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results.storage import Experiment
from trainables import checkpoint

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SWEEPER = [sys.executable, "-c", "from sweeper.cli import app; app()"]
SPACE = """
fixed: {dataset: digits, epochs: 2, batch_size: 64, train_subset: 64, eval_subset: 30, lr: 0.05, method: gaussian}
grids:
  - name: g
    axes: {sigma: [0.25, 0.5]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 32, alpha: 0.01, skip: 45, max_points: null, batch_size: 32, shard_size: 5}
"""
CURVES = (
    "train_loss",
    "train_acc",
    "test_clean_acc",
    "test_noisy_acc",
    "epsilon",
    "lr",
    "epoch_time_s",
)


def sweep(tmp: Path, log: str, *args: str, env: dict | None = None) -> tuple[int, str]:
    """`sweeper run grid` in its own process, stdout and stderr redirected to a file."""
    out = tmp / log
    with out.open("w") as f:
        code = subprocess.run(
            [
                *SWEEPER,
                "run",
                "grid",
                str(tmp / "tiny.yaml"),
                "--storage",
                str(tmp / "store"),
                *args,
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=800,
            env=env,
        ).returncode
    return code, out.read_text()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("watch")
    (tmp / "tiny.yaml").write_text(textwrap.dedent(SPACE))
    mlflow = ["--mlflow", f"file:{tmp / 'mlruns'}"] if importlib.util.find_spec("mlflow") else []
    code, out = sweep(tmp, "run1.log", *mlflow)
    assert code == 0, out[-3000:]
    trials = expand(load_space(str(tmp / "tiny.yaml")))
    return tmp, Experiment(str(tmp / "store"), "tiny"), trials, out


def scalars(events: Path) -> dict[str, set[int]]:
    """tag -> the steps it was written at, from a TensorBoard event file (TFRecord framing:
    length, its CRC, the Event proto, its CRC)."""
    from tensorboardX.proto import event_pb2

    data, i, tags = events.read_bytes(), 0, {}
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i : i + 8])
        event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
        for value in event.summary.value:
            tags.setdefault(value.tag, set()).add(event.step)
        i += 12 + n + 4
    return tags


def test_log_file_has_plain_lines_and_no_escape_codes(first_run):
    _, _, trials, out = first_run
    assert "\x1b" not in out
    for t in trials:
        assert f"trial {t.trial_id} started" in out and f"trial {t.trial_id} trained" in out
    assert "tiny: 2 trials: finished 2" in out  # the summary, as the run ends


def test_tensorboard_has_every_trials_curves(first_run):
    _, exp, trials, _ = first_run
    files = sorted(Path(exp.tune_dir).glob("run-*/*/events.out.tfevents.*"))
    assert len(files) == len(trials)
    runs = {events.parent.name for events in files}  # TensorBoard's run names: id and config
    assert runs == {f"{t.trial_id}_gaussian_sigma={t.sigma:g}_m=1" for t in trials}, runs
    for events in files:
        tags = scalars(events)
        for name in CURVES:
            assert tags.get(f"ray/tune/{name}") == {1, 2}, (events, sorted(tags))


def test_mlflow_has_one_run_per_trial_with_the_curves(first_run, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads file stores on request
    tmp, _, trials, _ = first_run
    client = mlflow.MlflowClient(f"file:{tmp / 'mlruns'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert len(runs) == len(trials)
    assert {r.data.params["trial/sigma"] for r in runs} == {"0.25", "0.5"}
    for run in runs:
        for name in CURVES:
            assert len(client.get_metric_history(run.info.run_id, name)) == 2, name


def test_corrupt_checkpoint_is_one_line_then_retrained(first_run):
    tmp, exp, trials, _ = first_run
    victim = trials[0].trial_id
    ckpt = Path(exp.checkpoint(victim))
    broken = ckpt.read_bytes()[:100]
    ckpt.write_bytes(broken)
    for path in Path(exp.certify_dir, victim).rglob("*.parquet"):
        path.unlink()
    code, out = sweep(tmp, "run2.log")
    assert code == 1 and "\x1b" not in out
    lines = [ln for ln in out.splitlines() if ln.startswith(f"  {victim} certify: ")]
    assert len(lines) == 1 and "CheckpointError: cannot read checkpoint" in lines[0], out[-3000:]
    assert lines[0].endswith("(2 tasks)")
    logs = list(Path(exp.root, "logs").glob("failures-*.log"))
    assert (
        len(logs) == 1
        and logs[0].read_text().count("Traceback") + logs[0].read_text().count("File ") >= 2
    )  # the full texts
    assert f"--only trial_id={victim} --retrain" in out
    status = CliRunner().invoke(app, ["status", "--storage", exp.storage, "--experiment", "tiny"])
    assert status.exit_code == 0
    row = next(ln for ln in status.stdout.splitlines() if ln.startswith(victim))  # a line each
    said = " ".join(status.stdout.split())  # the error in its column, or under the table
    assert "failed" in row.split() and "certify: CheckpointError" in said, status.stdout

    code, out = sweep(tmp, "run3.log", "--only", f"trial_id={victim}", "--retrain")
    assert code == 0, out[-3000:]
    kept = list(Path(exp.root, "retired").glob(f"*/trials/{victim}/checkpoint.pt"))
    assert len(kept) == 1 and kept[0].read_bytes() == broken  # moved aside, never deleted
    assert checkpoint.load(str(ckpt))["epoch"] == 2
    flat = " ".join(out.split())  # the run's view is of its slice (issue 30 item 2)
    assert f"slice 1 of 2 trials (--only trial_id={victim}): finished 1" in flat, out[-3000:]


def test_wandb_offline_logs_every_trial(tmp_path):
    pytest.importorskip("wandb")
    (tmp_path / "tiny.yaml").write_text(textwrap.dedent(SPACE))
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    code, out = sweep(tmp_path, "run.log", "--wandb", "sweeper-test", env=env)
    assert code == 0, out[-3000:]
    assert len(list(tmp_path.glob("wandb/offline-run-*"))) == 2
