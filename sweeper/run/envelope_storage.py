"""What the `envelope` certification strategy keeps on storage and how its driver reads it back
(issue 28; issue 38: nothing read back decides unchecked).

- `Arrivals`: each model's arrival number (its δ share), `Experiment.arrivals_json`;
- a pilot stage's rows (`PILOT_SCHEMA`, `Experiment.pilot_path`): read back only
  if they are the rows the step would draw (`pilot_refusal`): the points asked, in order, each
  with the data set's label (the driver's, from `envelope_stage.labels_task`, never from a
  file on storage), a class, the step's draws (stage 1: none where ĉ is not the label) and at
  most as many votes. Rows refused are named in a warning and drawn again; the planner's
  decisions are recomputed from the counts of the rows taken, never read from a record;
- the probe's rows (the pilot stage after the last, n estimation draws per point): read back
  by the driver as a pilot stage's, and by a FULL step's shard for the counts it takes
  (`probe_counts`, `probe_refusal`);
- a FULL step's compacted rows: their counts, checked the same way (`full_refusal`), the
  probed points' the probe's;
- each model's verdict, bounds and curves, written at the end (`record_verdicts`,
  `results.envelope_records`): for people and views, never read back by the driver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from functools import partial

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.attested_rows import attestation_problem
from sweeper.results.envelope_records import write_record
from sweeper.results.storage import Experiment
from sweeper.run.envelope_ledger import SKIPPED, FullRow, Ledger, PilotRow
from trainables.kernel import fileio
from trainables.kernel.stage_settings import CertifySpec

log = logging.getLogger(__name__)

PILOT_SCHEMA = pa.schema(
    [
        ("idx", pa.int64()),
        ("label", pa.int64()),
        ("cAHat", pa.int64()),  # the selected class (stage 1's n0 draws)
        ("draws", pa.int64()),  # this stage's pilot draws (0: none)
        ("votes", pa.int64()),  # of them, votes for cAHat
    ]
)


class Arrivals:
    """Each model's arrival number (1, 2, ...), kept in `Experiment.arrivals_json`."""

    def __init__(self, exp: Experiment, cert_id: str):
        self.path = exp.arrivals_json(cert_id)
        self.number: dict[str, int] = {}
        if fileio.exists(self.path):
            try:
                order = json.loads(fileio.read_bytes(self.path, limit=50_000_000))
                if not (isinstance(order, list) and all(isinstance(t, str) for t in order)):
                    raise ValueError("not a list of trial ids")
                self.number = {t: j + 1 for j, t in enumerate(dict.fromkeys(order))}
            except (OSError, ValueError) as e:
                log.warning("envelope: renumbering the models' arrivals (%s: %s)", self.path, e)

    def of(self, trial_id: str) -> int:
        """The model's number, given (and written) at its first arrival."""
        if trial_id not in self.number:
            self.number[trial_id] = len(self.number) + 1
            fileio.write_bytes_atomic(self.path, json.dumps(list(self.number)).encode())
        return self.number[trial_id]


def read_table(path: str) -> pa.Table:
    fs, p = fileio.filesystem(path)
    return pq.read_table(p, filesystem=fs)


def checked(
    path: str, refusal: Callable[[pa.Table], str | None], then: str, signed: tuple = ()
) -> tuple:
    """(the rows at `path` if `refusal` finds nothing wrong with them, else None; why not),
    a refusal named in a warning ("left out PATH (why): `then`"). `signed` (step, trial_id,
    setting_id, {expected settings}): with a key, the rows must carry that attestation
    (`attested_rows.attestation_problem`) first."""
    try:
        table = read_table(path)
        why = _unsigned(table, *signed) if signed else None
        why = why or refusal(table)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:
        why = f"unreadable: {e}"
    if why is None:
        return table, ""
    log.warning("envelope: left out %s (%s): %s", path, why, then)
    return None, f"{path} left out: {why}"


def _unsigned(table: pa.Table, step: str, trial_id: str, setting_id: str, expected: dict):
    return attestation_problem(table, step, trial_id, setting_id, **expected)


def _ints(values: list) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def pilot_refusal(
    table: pa.Table,
    stage: int,
    points: tuple[int, ...],
    draws: int,
    labels: Mapping[int, int],
    chat: Mapping[int, int] | None,
    classes: int,
) -> str | None:
    """Why pilot rows read back from storage cannot count for the step that draws `draws` per
    point at `stage` (None: they can). Stage 1 (the selection) needs a row for each of
    `points`, the model's; a later stage's rows may be of any of the model's points (a resumed
    run may ask others: a point left out only keeps its looser bound). `labels`: the data
    set's at each of the model's points; `chat`: the selected classes (stages after the
    first, whose rows must keep them)."""
    if not set(PILOT_SCHEMA.names) <= set(table.column_names):
        return f"not pilot rows (columns {', '.join(table.column_names)})"
    idx, label, c, d, v = (table.column(n).to_pylist() for n in PILOT_SCHEMA.names)
    wanted = set(points) if stage == 1 else set(labels)
    if (
        len(set(idx)) != len(idx)
        or not set(idx) <= wanted
        or (stage == 1 and len(idx) < len(wanted))
    ):
        return f"{len(idx)} rows, not one for each of the {len(points)} points the step asks"
    if not _ints([*label, *c, *d, *v]):
        return "a null or non-integer count"
    for i, lab, cls, drawn, votes in zip(idx, label, c, d, v, strict=True):
        if lab != labels[i]:
            return f"point {i}: label {lab}, the data set's is {labels[i]}"
        if not 0 <= cls < classes or (chat is not None and cls != chat[i]):
            return f"point {i}: class {cls}, not the selection's"
        want = draws if stage > 1 or cls == lab else 0
        if drawn != want or not 0 <= votes <= drawn:
            return f"point {i}: {votes} votes of {drawn} draws (the step draws {want})"
    return None


def probe_refusal(table: pa.Table, points: Mapping[int, tuple[int, int]], n: int) -> str | None:
    """Why a probe file cannot give the counts of `points` (idx -> (the data set's label, ĉ))
    to a full step (None: it can): a row for each, with its label and class, n draws and at
    most n votes."""
    if not set(PILOT_SCHEMA.names) <= set(table.column_names):
        return f"not pilot rows (columns {', '.join(table.column_names)})"
    rows = zip(*(table.column(c).to_pylist() for c in PILOT_SCHEMA.names), strict=True)
    found = {r[0]: r for r in rows}
    for i, (label, c) in points.items():
        if i not in found:
            return f"no row of point {i}"
        _, lab, cls, draws, votes = found[i]
        if not _ints([lab, cls, draws, votes]) or (lab, cls) != (label, c):
            return f"point {i}: label {lab} and class {cls}, not {label} and {c}"
        if draws != n or not 0 <= votes <= n:
            return f"point {i}: {votes} votes of {draws} draws (the probe draws n = {n})"
    return None


def probe_rows(model: str, table: pa.Table) -> list[FullRow]:
    """The probe's counts (its rows' votes among n draws) as the full step's rows are."""
    cols = [table.column(c).to_pylist() for c in ("idx", "draws", "votes")]
    return [FullRow(model, i, v) for i, d, v in zip(*cols, strict=True) if d > 0]


def pilot_rows(model: str, stage: int, table: pa.Table) -> list[PilotRow]:
    cols = [table.column(c).to_pylist() for c in ("idx", "cAHat", "draws", "votes")]
    return [PilotRow(model, stage, *row) for row in zip(*cols, strict=True)]


def full_refusal(
    table: pa.Table, labels: Mapping[int, int], n: int, probed: Mapping[int, int] | None = None
) -> str | None:
    """Why a FULL step's compacted rows read back cannot count (None: they can): each of the
    model's points once, with the data set's label and a count of at most n votes (or none),
    the count the probe drew at each point it drew (`probed`: idx -> nA)."""
    idx, label = table.column("idx").to_pylist(), table.column("label").to_pylist()
    counts = table.column("count").to_pylist()
    if sorted(idx) != sorted(labels):
        return f"{len(idx)} rows, not the model's {len(labels)} points"
    for i, lab, count in zip(idx, label, counts, strict=True):
        if lab != labels[i]:
            return f"point {i}: label {lab}, the data set's is {labels[i]}"
        if count is not None and not (_ints([count]) and 0 <= count <= n):
            return f"point {i}: count {count} of n = {n} draws"
        if probed and i in probed and count != probed[i]:
            return f"point {i}: count {count}, the probe drew {probed[i]}"
    return None


def full_rows(model: str, table: pa.Table) -> list[FullRow]:
    counts = table.column("count").to_pylist()
    idx = table.column("idx").to_pylist()
    return [
        FullRow(model, i, SKIPPED if c is None else c) for i, c in zip(idx, counts, strict=True)
    ]


def record_verdicts(exp: Experiment, cert_id: str, ledger: Ledger) -> None:
    """Each model's verdict, bounds and curves (`results.envelope_records`)."""
    s = ledger.settings
    for name, m in ledger.models.items():
        exact = s.radii[m.exact_from] if m.exact_from < len(s.radii) else None
        record = {
            "status": ledger.status(name),
            "strategy": "envelope",
            "delta": s.delta,
            "pilots": list(s.pilots),
            "radii": list(s.radii),
            "upper": None if m.upper_curve is None else m.upper_curve.tolist(),
            "plug_in": None if m.plug_in is None else m.plug_in.tolist(),
            "certified": None if m.certified is None else m.certified.tolist(),
            # below this radius some points that could not reach it were not certified: the
            # model's accuracy there is a lower bound of what `full` would report
            "exact_from": exact if m.certified is not None else None,
            "points": len(m.idx),
            "pilot_draws": 0 if m.draws is None else int(m.draws.sum()),
            # points whose exact count the probe drew before the model was pruned or certified
            "probed": 0 if m.probe is None else int((m.probe != SKIPPED).sum()),
        }
        write_record(exp, name, cert_id, record)


def probe_counts(exp: Experiment, trial_id: str, spec: CertifySpec, points: list) -> dict:
    """idx -> nA of `points` ((idx, the data set's label, ĉ, _)) from the model's probe file,
    checked as the driver checks it (under a key its attestation first): a row per point with
    its label and class and n draws; a file that fails raises (the shard fails, and the run
    that decides the probe again draws it again)."""
    if not points:
        return {}
    stage = len(spec.pilot_stages) + 1
    path = exp.pilot_path(trial_id, spec.cert_id, stage)
    want = {i: (label, c) for i, label, c, _ in points}
    why = partial(probe_refusal, points=want, n=spec.n)
    table, problem = checked(
        path, why, "the shard fails", ("pilot", trial_id, spec.cert_id, {"stage": stage})
    )
    if table is None:
        raise RuntimeError(f"the probe's counts cannot be taken: {problem}")
    rows = zip(*(table.column(c).to_pylist() for c in ("idx", "votes")), strict=True)
    return {i: v for i, v in rows if i in want}
