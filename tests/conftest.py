"""Shared test set-up: few threads (2-core CI machine), deterministic torch."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session: 2 CPUs and one fake GPU (for packing tests)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
