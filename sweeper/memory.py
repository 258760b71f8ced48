"""The memory pass that makes data-dependent certification sound (DDRS, Alfarra et al. 2022).

The Monte-Carlo part of DDRS certification runs in parallel shards; the memory cannot: it
is order dependent. Once every shard of a model is on storage, one pass over all of that
model's certificates, in ascending test index, applies `trainables.ddrs.memory_certify` to the
inputs (read again from the data set by index) and writes, next to the shards,

    certify/<trial_id>/<cert_id>/memory.parquet
        idx, predict_memory, radius_memory, correct_memory, memory_changed

`sweeper.results.load_results` joins it to the raw rows. A different order (or another subset
of test points) can give different adjusted certificates; the order here is fixed.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results import MEMORY_FILE, MEMORY_SCHEMA, read_tables
from sweeper.storage import SHARD_RE, Experiment
from trainables import fileio


def memory_path(exp: Experiment, trial_id: str, cert_id: str) -> str:
    return fileio.join(exp.certify_dir, trial_id, cert_id, MEMORY_FILE)


def model_shards(exp: Experiment, trial_id: str, cert_id: str) -> list[str]:
    directory = fileio.join(exp.certify_dir, trial_id, cert_id)
    return [f for f in fileio.list_files(directory, ".parquet") if SHARD_RE.search(f)]


def run_memory_pass(exp: Experiment, trial_id: str, cert_id: str) -> int:
    """Adjust one model's data-dependent certificates; returns how many points changed.
    Skips (returns 0) if the memory file exists already."""
    from trainables.config import TrialConfig
    from trainables.datasets import load_dataset
    from trainables.ddrs import memory_certify
    from trainables.trial_status import read_status

    out = memory_path(exp, trial_id, cert_id)
    if fileio.exists(out):
        return 0
    rows = read_tables(model_shards(exp, trial_id, cert_id)).to_pandas().sort_values("idx")
    cfg = TrialConfig.from_dict(read_status(exp.trial_dir(trial_id))["config"])
    dataset = load_dataset(cfg.dataset, "test", cfg.data_dir)
    idx = rows["idx"].to_numpy()
    points = np.stack([dataset[int(i)][0].numpy().ravel() for i in idx])
    result = memory_certify(points, rows["predict"].to_numpy(), rows["radius"].to_numpy())
    correct = (result.prediction == rows["label"].to_numpy()) & (result.prediction != -1)
    n = len(idx)
    table = pa.Table.from_pydict(
        {
            "trial_id": [trial_id] * n, "cert_id": [cert_id] * n, "idx": idx,
            "predict_memory": result.prediction, "radius_memory": result.radius,
            "correct_memory": correct, "memory_changed": result.changed,
        },
        schema=MEMORY_SCHEMA,
    )  # fmt: skip
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    fileio.write_bytes_atomic(out, buffer.getvalue())
    return int(result.changed.sum())
