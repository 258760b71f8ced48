"""The `envelope` certification strategy's tasks (issue 28), run on workers.

- `pilot_task`: CERTIFY's selection (n0 draws, ĉ = the top class) at pilot stage 1, and the
  pilot's estimation draws (votes for ĉ) on the points asked; a point whose ĉ is not its label
  gets no pilot draws at stage 1 (it counts at no radius). Rows: `PILOT_SCHEMA`, one Parquet
  per model and stage (`Experiment.pilot_path`), never read as certification rows.
- `labels_task`: the test split's labels at a model's points, as the data plane loads it: the
  driver's labels, which rows read back from storage must carry (`envelope_storage`).
- `ENVELOPE_CERTIFY`: the stage CERTIFY's rows (`certify_rows.SCHEMA`, its shard and compacted
  files) for the planner's FULL step: on the points asked, n fresh draws counting the votes for
  the ĉ of the selection, i.e. exact CERTIFY(n0, n, α) (its selection draws are the pilot's
  stage-1 n0 draws, independent of the n); every other point of the model is a row *not
  estimated* (count, p_lower and radius null, predict −1, correct false:
  `provenance.not_estimated`), which counts as not certified at any radius.

Draws follow `trainables.certify_points`: every point draws from its own streams, seeded by
the model's seed `seed_for(trial_id, spec.draws_id)` (the cert_id without the strategy), the
role and the point's index: the selection ("select") at pilot stage 1 and the FULL step's
estimation ("estimate") are the very draws the `full` strategy takes for that point, and a
pilot stage's draws ("pilot-<stage>") are a stream of their own. So a model certified under
both strategies gets the same certificate on every point the envelope strategy draws (on a
CPU; a GPU's streams also depend on how the draws are chunked).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import pyarrow as pa

from sweeper.results.certify_rows import CERTIFY_ROWS, shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.run.envelope_storage import PILOT_SCHEMA, probe_counts
from sweeper.run.stage import Shard, Stage
from trainables.kernel.catalog import NUM_CLASSES
from trainables.kernel.stage_settings import CertifySpec


@dataclass(frozen=True)
class EnvelopeFull:
    """The setting of a FULL step of one model: the spec (its cert_id names the files) and per
    point (idx, ĉ, drawn): drawn points get n draws, the points `probed` take their counts
    from the probe's file (the same estimation draws, drawn before), the others are not
    estimated. A row's label is the data set's, read where the point's input is
    (`full_shard`)."""

    spec: CertifySpec
    points: tuple[tuple[int, int, bool], ...]
    probed: tuple[int, ...] = ()

    @property
    def setting_id(self) -> str:
        return self.spec.cert_id

    @property
    def skip(self) -> int:
        return self.spec.skip

    @property
    def max_points(self) -> int | None:
        return self.spec.max_points

    @property
    def shard_size(self) -> int:
        return self.spec.shard_size

    def test_points(self, num_test: int) -> list[int]:
        return self.spec.test_points(num_test)


def _smooth(exp: Experiment, trial_id: str, spec: CertifySpec, cpus: float):
    """(the smoothed classifier, the resolved settings, the test set, the device)."""
    import torch

    from trainables import checkpoint, runtime
    from trainables.attestations import verify_checkpoint
    from trainables.datasets import load_dataset
    from trainables.smoothing import Smooth

    torch.set_num_threads(max(1, int(cpus)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, cfg = checkpoint.load_model(exp.checkpoint(trial_id), device, verify_checkpoint)
    settings = spec.resolved(cfg.sigma)
    runtime.check_precision(settings.precision, device)
    runtime.prepare(model.eval(), device, settings.channels_last, settings.compile)
    noise = runtime.noise_dtype(settings.precision)
    assert settings.sigma is not None
    smooth = Smooth(model, NUM_CLASSES[cfg.dataset], settings.sigma, noise)
    return smooth, settings, load_dataset(cfg.dataset, "test", cfg.data_dir), device, cfg


def _seed(trial_id: str, spec: CertifySpec) -> int:
    from trainables.certify_points import seed_for

    return seed_for(trial_id, spec.draws_id)


def _votes(smooth, settings: CertifySpec, xs, chat, draws: int, generators):
    """Votes for each point's ĉ among `draws` fresh draws (as run: the settings' precision)."""
    from trainables import runtime

    if len(xs) == 0:
        return []
    with runtime.autocast(settings.precision, xs.device):
        counts = smooth.sample_counts(xs, draws, settings.batch_size, generators)
    return counts.gather(1, chat.unsqueeze(1)).squeeze(1).tolist()


def labels_task(dataset: str, data_dir: str | None, idx: tuple[int, ...]) -> list[int]:
    """The labels of the test split of `dataset` at `idx`, as the data plane loads it."""
    from trainables.datasets import load_dataset

    data = load_dataset(dataset, "test", data_dir)
    labels = getattr(data, "labels", None)  # image tensors; an image folder: its targets
    if labels is None:
        labels = getattr(getattr(data, "folder", None), "targets", None)
    if labels is None:
        return [int(data[i][1]) for i in idx]
    return [int(labels[i]) for i in idx]


def pilot_task(
    exp: Experiment,
    trial_id: str,
    spec: CertifySpec,
    stage: int,
    points: tuple[tuple[int, int], ...],
    draws: int,
    cpus: float,
    replace: bool = False,
) -> pa.Table:
    """One pilot stage of one model on `points` ((idx, ĉ), ĉ ignored at stage 1, where the
    n0 selection draws pick it): its `PILOT_SCHEMA` rows, written to the model's pilot file
    (over the file there if `replace`: the driver refused it)."""
    import torch

    from trainables import runtime
    from trainables.certify_points import point_generators
    from trainables.kernel import fileio

    out = exp.pilot_path(trial_id, spec.cert_id, stage)
    if not points:  # every point resolved or out of reach: the stage draws nothing
        table = PILOT_SCHEMA.empty_table()
        if replace or not fileio.exists(out):
            write_table(_signed_pilot(exp, trial_id, spec.cert_id, stage, [], table), out)
        return table
    smooth, settings, dataset, device, _ = _smooth(exp, trial_id, spec, cpus)
    seed, idx = _seed(trial_id, spec), [i for i, _ in points]
    items = [dataset[i] for i in idx]
    xs = torch.stack([it[0] for it in items]).to(device)
    labels = torch.tensor([int(it[1]) for it in items], device=device)
    if stage == 1:  # CERTIFY's selection, drawn as `full` draws it
        select = point_generators(seed, "select", idx, device)
        with runtime.autocast(settings.precision, device):
            chat = smooth.sample_counts(xs, spec.n0, settings.batch_size, select).argmax(1)
    else:
        chat = torch.tensor([c for _, c in points], device=device)
    todo = (chat == labels) if stage == 1 else torch.ones_like(chat, dtype=torch.bool)
    mine = [i for i, t in zip(idx, todo.tolist(), strict=True) if t]
    pilot = point_generators(seed, stream_of(spec, stage), mine, device)
    votes = iter(_votes(smooth, settings, xs[todo], chat[todo], draws, pilot))
    drawn = todo.tolist()
    cols = {"idx": idx, "label": labels.tolist(), "cAHat": chat.tolist()}
    cols["draws"] = [draws if d else 0 for d in drawn]
    cols["votes"] = [next(votes) if d else 0 for d in drawn]
    table = pa.table(cols, schema=PILOT_SCHEMA)
    if replace or not fileio.exists(out):
        write_table(_signed_pilot(exp, trial_id, spec.cert_id, stage, idx, table), out)
    return table


def stream_of(spec: CertifySpec, stage: int) -> str:
    """The draws of pilot stage `stage`: a stream of its own, except the probe's (the stage
    after the last pilot), which are CERTIFY's estimation draws, n per point."""
    return "estimate" if stage > len(spec.pilot_stages) else f"pilot-{stage}"


def _signed_pilot(exp: Experiment, trial_id: str, cert_id: str, stage: int, idx, table):
    """The pilot rows signed with this worker's key (as they are without one): drawn at
    `stage` from the checkpoint its training attested, for this model, setting and points."""
    from sweeper.results.attested_rows import points_digest, signed
    from trainables.attestations import trained_checkpoint
    from trainables.kernel.attestation import load_signing_key

    key = load_signing_key()
    if key is None:
        return table
    made = {"trial_id": trial_id, "setting_id": cert_id, "stage": stage}
    inputs = {"checkpoint.pt": trained_checkpoint(exp.trial_dir(trial_id), key)}
    return signed(table, key, "pilot", inputs, {**made, "points": points_digest(idx)})


def full_shard(exp: Experiment, shard: Shard, setting: EnvelopeFull, cpus: float) -> pa.Table:
    """A FULL step's shard: CERTIFY's rows of the drawn points, not-estimated rows of the
    others (module docstring), each with the data set's label."""
    import time

    import torch

    from trainables.certify_points import point_generators

    smooth, settings, dataset, device, cfg = _smooth(exp, shard.trial_id, setting.spec, cpus)
    here = set(shard.indices)  # (idx, the data set's label, ĉ, drawn) of the shard's points
    mine = [(i, int(dataset[i][1]), c, d) for i, c, d in setting.points if i in here]
    probed = set(setting.probed) & here
    drawn = [p for p in mine if p[3] and p[0] not in probed]
    t0 = time.perf_counter()
    xs = torch.stack([dataset[i][0] for i, *_ in drawn]).to(device) if drawn else torch.zeros(0)
    chat = torch.tensor([c for _, _, c, _ in drawn], dtype=torch.long, device=device)
    seed = _seed(shard.trial_id, setting.spec)
    estimate = point_generators(seed, "estimate", [p[0] for p in drawn], device)
    votes = _votes(smooth, settings, xs, chat, settings.n, estimate)
    nA = dict(zip([p[0] for p in drawn], votes, strict=True))
    nA.update(probe_counts(exp, shard.trial_id, setting.spec, [p for p in mine if p[0] in probed]))
    per_point = (time.perf_counter() - t0) / max(1, len(drawn))
    rows = [row_of(p, nA.get(p[0]), settings, per_point) for p in mine]
    cols = {k: [r[k] for r in rows] for k in COLUMNS}
    return _table(exp, shard, setting.spec, cfg, cols, device)


COLUMNS = (
    *("idx", "label", "sigma_cert", "predict", "count"),
    *("p_lower", "radius", "correct", "time_s"),
)


def row_of(point: tuple, nA: int | None, settings: CertifySpec, per_point: float) -> dict:
    """CERTIFY's row of a drawn point (nA: its votes for ĉ among n), else a not-estimated one."""
    from trainables.kernel.certificates import ABSTAIN, certificate_from_counts

    idx, label, c, _ = point
    row = {"idx": idx, "label": label, "sigma_cert": settings.sigma, "time_s": per_point}
    if nA is None:
        none = {"predict": ABSTAIN, "count": None, "p_lower": None, "radius": None}
        return {**row, **none, "correct": False, "time_s": 0.0}
    assert settings.sigma is not None
    cert = certificate_from_counts(c, nA, settings.n, settings.alpha, settings.sigma)
    certified = {"predict": cert.prediction, "count": cert.nA, "p_lower": cert.p_lower}
    return {**row, **certified, "radius": cert.radius, "correct": cert.prediction == label}


def _table(exp: Experiment, shard: Shard, spec: CertifySpec, cfg, cols: dict, device):
    import torch

    constants = {"smoothing": "fixed", "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    metadata = {
        "certify_backend": (
            f"sweeper.certify envelope torch-{torch.__version__} {device.type} {platform.node()}"
        ),
        "shard": f"{shard.index}/{shard.count}",
        "strategy": "envelope",
    }
    return shard_table(cfg, exp.name, shard.setting_id, constants, cols, metadata)


ENVELOPE_CERTIFY = Stage.of(CERTIFY_ROWS, full_shard)
