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
