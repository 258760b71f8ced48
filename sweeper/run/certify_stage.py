"""Certification as a stage of the sharded-stage engine (`sweeper.run.shards`).

Per shard: load the model's checkpoint once, run CERTIFY on the shard's test points, return
the rows (`sweeper.results.certify_rows.SCHEMA`). The setting is a `CertifySpec`, which
`trainables.certify_points` runs as it is (σ resolved for the model); its `cert_id` names the
files, so other settings (n, α, σ_cert, DDRS) add files beside the old ones. For data-dependent
smoothing (DDRS) the finishing step, once all of a model's shards exist, is the memory pass
that makes its certificates sound (`sweeper.run.ddrs_memory`): the compacted file holds the adjusted
predict/radius/correct and the Monte-Carlo ones as *_raw.
"""

from __future__ import annotations

import platform

import pyarrow as pa
import pyarrow.compute as pc

from sweeper.results.certify_rows import CERTIFY_ROWS, shard_table
from sweeper.results.storage import Experiment
from sweeper.run.stage import Shard, Stage
from trainables.kernel.catalog import NUM_CLASSES
from trainables.kernel.stage_settings import CertifySpec


def certify_shard(exp: Experiment, shard: Shard, spec: CertifySpec, cpus: float) -> pa.Table:
    """CERTIFY one shard's points (on a worker): its rows, with the backend in the metadata."""
    import torch

    from trainables import checkpoint
    from trainables.attestations import verify_checkpoint
    from trainables.certify_points import certify_points, run_mode, seed_for
    from trainables.datasets import load_dataset

    torch.set_num_threads(max(1, int(cpus)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, cfg = checkpoint.load_model(exp.checkpoint(shard.trial_id), device, verify_checkpoint)
    settings = spec.resolved(cfg.sigma)
    dataset = load_dataset(cfg.dataset, "test", cfg.data_dir)
    seed = seed_for(shard.trial_id, spec.draws_id)  # per model: each point draws its own
    cols = certify_points(
        model, dataset, shard.indices, NUM_CLASSES[cfg.dataset], settings, seed, device
    )
    smoothing = "fixed" if spec.ddrs is None else "data-dependent"
    constants = {"smoothing": smoothing, "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    norm = model[0]
    means, sds = (norm.get_buffer(b).flatten().tolist() for b in ("means", "sds"))
    metadata = {
        "certify_backend": (
            f"sweeper.certify torch-{torch.__version__} {device.type} {platform.node()}"
        ),
        "normalization": f"{type(norm).__name__}(means={means}, sds={sds})",
        "shard": f"{shard.index}/{shard.count}",
        **run_mode(settings, device),  # precision, channels_last, compile: how f was run
    }
    return shard_table(cfg, exp.name, shard.setting_id, constants, cols, metadata)


def finish(exp: Experiment, trial_id: str, setting, table: pa.Table) -> pa.Table:
    """A model's complete rows as they are compacted: data-dependent ones (their rows say so)
    made sound by the memory pass, fixed-σ rows as they are."""
    if not pc.any(pc.equal(table.column("smoothing"), "data-dependent")).as_py():
        return table
    from sweeper.run.ddrs_memory import sound_rows

    return sound_rows(exp, trial_id, setting.setting_id, table)


CERTIFY = Stage.of(CERTIFY_ROWS, certify_shard, finish)
