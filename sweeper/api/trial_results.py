"""A `Reading`'s trials as Ray Tune's `Result`s (`reading.TrialResult`): each trial of the
sweep (sweep.json's, the `--only` slice's) and each other trial with rows (imported results),
with its config, trial.json's last metrics, its checkpoint's path, `sweeper status`'s state
and its certification per setting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sweeper.api.rows_read import RowsRead
from sweeper.plan.grid import select
from sweeper.results.certify_rows import MODEL_KEY, identity_fields
from sweeper.results.status import Status, StatusReader
from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    import pandas as pd


class Reading(RowsRead, Protocol):
    """What these functions read of a `reading.Reading` (a protocol, so that this module,
    which `reading` imports, imports nothing of it)."""

    @property
    def selection(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Certification:
    """A trial's rows under one certification setting (`cert_id`): points certified, its
    clean accuracy (correct at radius 0) and ACR, whether it is sound (a data-dependent model
    awaiting its memory pass is not), the shards it misses, whether its files are attested
    (None: no key to check with)."""

    cert_id: str
    points: int
    clean_accuracy: float
    acr: float
    sound: bool
    missing_shards: tuple[int, ...] = ()
    attested: bool | None = None


@dataclass(frozen=True)
class TrialResult:
    """One trial, as Tune's `Result`: its `config` (sweep.json's, else its rows'), `metrics`
    (trial.json's last, empty if it never ran), `checkpoint` (the path of its newest one, None
    if none was written), `path` (its directory), `status` (`sweeper status`'s state:
    pending, training, trained, certifying, certified, failed, ...; `imported` for results
    without a trial of the sweep), `error` (why it failed) and `certification` per setting."""

    trial_id: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    checkpoint: str | None
    path: str
    status: str
    certification: dict[str, Certification] = field(default_factory=dict)
    error: str = ""


IMPORTED = "imported"  # the status of a trial with rows but none in the sweep


def trial_results(reading: Reading) -> list[TrialResult]:
    """The slice's trials, the sweep's first (in its order), then those only rows have."""
    reader = StatusReader(reading.exp)
    try:
        st: Status | None = reader.read()
    except (FileNotFoundError, ProblemsError, ValueError):  # no sweep.json: imported results
        st = None
    rows = {t.trial_id: t for t in st.trials} if st is not None else {}
    configs = st.configs if st is not None else []
    if reading.selection and configs:
        configs, _ = select(configs, reading.selection)
    certified = certifications(reading)
    docs = reader.trial_docs()
    out = []
    for cfg in configs:
        row = rows.get(cfg.trial_id)
        state, error = (row.state, row.error) if row is not None else ("pending", "")
        doc = docs.get(cfg.trial_id) or {}
        out.append(_result(reading, cfg.trial_id, cfg.to_dict(), doc, state, error, certified))
    listed = {cfg.trial_id for cfg in configs}
    for tid in dict.fromkeys(reading.frame["trial_id"]) if len(reading.frame) else ():
        if tid not in listed:
            config = _config_of_rows(reading.frame, tid)
            out.append(_result(reading, tid, config, {}, IMPORTED, "", certified))
    return out


def _result(
    reading: Reading,
    tid: str,
    config: dict[str, Any],
    doc: dict[str, Any],
    state: str,
    error: str,
    certified: dict[str, dict[str, Certification]],
) -> TrialResult:
    checkpoint = reading.exp.checkpoint(tid)
    return TrialResult(
        trial_id=tid,
        config=config,
        metrics=dict(doc.get("metrics") or {}),
        checkpoint=checkpoint if fileio.exists(checkpoint) else None,
        path=reading.exp.trial_dir(tid),
        status=state,
        certification=certified.get(tid, {}),
        error=error,
    )


def certifications(reading: Reading) -> dict[str, dict[str, Certification]]:
    """trial_id -> cert_id -> its `Certification`, from every validated row of the read (a
    model awaiting its memory pass is there, not sound)."""
    from sweeper.results.envelope import model_table

    frame = reading.results.frame
    if frame.empty or not {"correct", "radius", "predict", "sound"} <= set(frame.columns):
        return {}
    table = model_table(frame)
    unsound = set(map(tuple, frame.loc[~frame["sound"], MODEL_KEY].drop_duplicates().to_numpy()))
    a = reading.results.attestations
    out: dict[str, dict[str, Certification]] = {}
    columns = ("trial_id", "cert_id", "points", "clean_acc", "acr")
    for tid, cid, points, clean, acr in zip(*(table[c].tolist() for c in columns), strict=True):
        key = (str(tid), str(cid))
        out.setdefault(key[0], {})[key[1]] = Certification(
            cert_id=key[1],
            points=int(points),
            clean_accuracy=float(clean),
            acr=float(acr),
            sound=key not in unsound,
            missing_shards=tuple(reading.results.missing_shards.get(key, ())),
            attested=None if a is None else key not in a.unattested,
        )
    return out


def _config_of_rows(frame: pd.DataFrame, trial_id: str) -> dict[str, Any]:
    """An imported trial's config as its rows carry it (the schema's config columns)."""
    first = frame[frame["trial_id"] == trial_id].iloc[0]
    return {f.name: first[f.name] for f in identity_fields() if f.name in first.index}
