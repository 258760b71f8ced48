"""The benchmark scripts' argument handling and their paths without a GPU (no timing here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def gpu_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu.py"), *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures when there is a GPU")
@pytest.mark.parametrize(
    "args", [[], ["--smoke"], ["--precisions", "bf16", "--concurrency", "1,8"]]
)
def test_gpu_script_skips_cleanly_without_cuda(args):
    done = gpu_script(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gpu.py: no CUDA device here; nothing measured (run it on a machine with a GPU)"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--precisions", "fp32,fp8"], "unknown precision 'fp8'"),
        (["--batch-sizes", "400,x"], "expected integers like 1,2,4"),
        (["--concurrency", "0"], "expected integers >= 1"),
        (["--seconds"], "expected one argument"),
    ],
)
def test_gpu_script_rejects_bad_arguments_before_looking_for_a_gpu(args, message):
    done = gpu_script(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_sweep_scale_standins_write_rows_the_reader_counts_and_copies_of_them(tmp_path):
    """sweep_scale.py's stand-in certification and its 10x `replicate` give rows the reader
    accepts (its timings were of 1x the models while the reader refused the copies)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import sweep_scale
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from sweeper.plan.grid import expand
    from sweeper.plan.spaces import load_space
    from sweeper.results.certify_rows import load_results
    from sweeper.results.storage import Experiment
    from sweeper.run import compaction, shards
    from trainables.kernel.trial_status import write_status

    spec = load_space("cifar10")
    exp = Experiment(str(tmp_path), "cifar10")
    trials = expand(spec)[:2]
    for cfg in trials:
        write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", cfg.epochs, {})
        planned = shards.plan(cfg, "certify", spec.certify, sweep_scale.TEST_SIZE)
        for shard in planned:
            shards.run_shard(exp, sweep_scale.STANDIN, shard, spec.certify, 1.0)
        compaction.compact(exp, sweep_scale.STANDIN, cfg.trial_id, spec.certify, len(planned))
    results = load_results(exp)
    assert results.invalid == [] and len(results.frame) == 2 * 500
    assert sweep_scale.replicate(exp, 3) == 6
    again = load_results(exp)
    assert again.invalid == [] and len(again.frame) == 6 * 500
    assert sorted(again.frame["n0"].unique()) == [100, 101, 102]


def test_envelope_search_replay_runs_the_sweeps_searcher_and_prints_the_issues_line():
    """The replay on a made-up landscape (the logs are not in the repository): its last line
    is the issue's, and the models it counts are the digits grid's."""
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "envelope_search.py"),
            "--smoke",
            "--seeds",
            "2",
            "--bootstraps",
            "1",
            "--concurrent",
            "3",
            "--no-per-sigma",
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    _, lanes, *_, resampled, alone, last = done.stdout.splitlines()
    assert lanes.startswith("3 trials at once"), lanes
    assert resampled.startswith("on 1 bootstraps of the test points: stopped at "), resampled
    assert alone.startswith("the search alone (no audit): stopped at "), alone
    assert last.startswith("envelope search: 34 models, 2 seeds; stopped at "), last
    assert "within 0.02 at every radius in " in last and "cheapest-first " in last


def test_envelope_search_replay_needs_logs_or_smoke():
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "envelope_search.py")],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "give --logs DIR (or --smoke)" in done.stderr
