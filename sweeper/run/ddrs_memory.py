"""The DDRS memory pass: what makes data-dependent certification sound (Alfarra et al. 2022).

The Monte-Carlo part of DDRS certification runs in parallel shards; the memory cannot: it is
order dependent. It is certification's finishing step (`sweeper.run.certify_stage.finish`), run once
every shard of a model exists, just before its rows are compacted: one pass over all of the
model's certificates in ascending test index applies `trainables.ddrs.memory_certify` to the
inputs (read again from the data set by index), abstentions in the memory as the authors'
post_processing_memory_based.py keeps them (radius-0 balls of class −1: a later ball is shrunk
to leave an abstained point out, an abstained point inside an earlier ball takes its class).
The compacted rows hold the adjusted predict/radius/correct and the Monte-Carlo ones as
predict_raw/radius_raw/correct_raw, with `memory_changed`. A different order (or another
subset of test points) can give different adjusted certificates; the order here is fixed.

Experiments certified before compaction existed have a `memory.parquet` beside the shards
(idx, predict_memory, radius_memory, correct_memory, memory_changed): it is used once it passes
the reader's checks (`sweeper.results.legacy_memory`); one that fails stops the compaction,
named, so that nothing it says reaches a compacted file.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sweeper.results.certify_rows import MEMORY_SCHEMA
from sweeper.results.legacy_memory import read_memory, valid_memory
from sweeper.results.storage import Experiment
from trainables.kernel import fileio


def sound_rows(exp: Experiment, trial_id: str, cert_id: str, table: pa.Table) -> pa.Table:
    """One data-dependent model's complete rows (sorted by idx), made sound."""
    legacy = exp.memory_path(trial_id, cert_id)
    if fileio.exists(legacy):
        memory = _legacy(exp, legacy, table).sort_values("idx")
        prediction = memory["predict_memory"].to_numpy()
        radius = memory["radius_memory"].to_numpy()
        changed = memory["memory_changed"].to_numpy()
    else:
        prediction, radius, changed = _memory_pass(exp, trial_id, table)
    return with_memory(table, prediction, radius, changed)


def _legacy(exp: Experiment, legacy: str, table: pa.Table):
    """The legacy memory file's rows, checked against the model's rows as a reader checks
    them (`sweeper.results.legacy_memory`); RuntimeError naming it and why if they fail."""
    parsed = exp.parse_stage_file("certify", legacy)
    if parsed is None:  # found by the stage's own listing, so always a file of the layout
        raise RuntimeError(f"{legacy}: not a memory file of the layout")
    memory, invalid = read_memory([parsed], MEMORY_SCHEMA)
    if not invalid:
        memory, invalid = valid_memory(table.to_pandas(), memory)
    if invalid or memory.empty:
        why = invalid[0] if invalid else f"{legacy}: not the points of its model"
        raise RuntimeError(f"{why}: move it away (the memory pass then runs again)")
    return memory


def _memory_pass(exp: Experiment, trial_id: str, table: pa.Table):
    """(prediction, radius, changed) of `memory_certify` over the model's points."""
    from sweeper.results.trial_records import stored_trial
    from trainables.datasets import load_dataset
    from trainables.ddrs import memory_certify

    cfg = stored_trial(exp, trial_id)  # its trial.json's config, if it is the trial's
    if isinstance(cfg, str):
        raise FileNotFoundError(f"{cfg} in {exp.root}")
    dataset = load_dataset(cfg.dataset, "test", cfg.data_dir)
    idx = table.column("idx").to_numpy()
    points = np.stack([dataset[int(i)][0].numpy().ravel() for i in idx])
    result = memory_certify(
        points, table.column("predict").to_numpy(), table.column("radius").to_numpy()
    )
    return result.prediction, result.radius, result.changed


def with_memory(table: pa.Table, prediction, radius, changed) -> pa.Table:
    """The rows with the adjusted certificates in place and the raw ones kept."""
    label = table.column("label").to_numpy()
    correct = (np.asarray(prediction) == label) & (np.asarray(prediction) != -1)
    replaced = {
        "predict_raw": table.column("predict"),
        "radius_raw": table.column("radius"),
        "correct_raw": table.column("correct"),
        "predict": pa.array(prediction, pa.int64()),
        "radius": pa.array(radius, pa.float64()),
        "correct": pa.array(correct, pa.bool_()),
        "memory_changed": pa.array(changed, pa.bool_()),
    }
    for name, column in replaced.items():
        table = table.set_column(table.schema.get_field_index(name), name, column)
    return table
