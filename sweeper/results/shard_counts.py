"""What a trial's stage files count for, from their names alone: its shards done and planned
per setting (`model_shards`; `planned_shards` against the plan, a setting the envelope
strategy pruned the model under counted done) and the test points they hold (`points_done`,
`file_points`: what the status's throughput counts); what is on storage for one model and
setting (`progress`: the sharded-stage engine resumes from it) and whether every model's rows
are compacted (`all_compacted`)."""

from __future__ import annotations

from dataclasses import dataclass

from sweeper.results.storage import Experiment, StageFile, index_chunks
from trainables.kernel.catalog import STANDARD_TEST_SIZE


@dataclass(frozen=True)
class Shards:
    """A stage's shards of one trial (all its settings): written, and planned."""

    done: int = 0
    total: int | None = None  # None: not known (nothing planned or written yet)

    def __add__(self, other: Shards) -> Shards:
        known = [t for t in (self.total, other.total) if t is not None]
        return Shards(self.done + other.done, sum(known) if known else None)


def pruned_settings(exp: Experiment) -> dict[str, set[str]]:
    """trial_id -> the cert_ids the envelope strategy pruned it under (its records)."""
    from sweeper.results.envelope_records import pruned

    out: dict[str, set[str]] = {}
    for tid, cert_id in pruned(exp):
        out.setdefault(tid, set()).add(cert_id)
    return out


def planned_chunks(certify: dict, dataset: str) -> list[tuple[int, ...]]:
    """The certification shards' test points of a data set's standard test split (none: not
    known, e.g. a miniature data set in tests, or a certify block without them)."""
    size = STANDARD_TEST_SIZE.get(dataset)
    if size is None or not all(k in certify for k in ("skip", "max_points", "shard_size")):
        return []
    return index_chunks(size, certify["skip"], certify["max_points"], certify["shard_size"])


def file_points(
    files: list[tuple[StageFile, float]], chunks: dict, dataset: dict[str, str]
) -> list[tuple[float, int]]:
    """(time written, points in it) of every file of a stage: what the throughput counts."""
    out = []
    for f, mtime in files:
        plan = chunks.get(dataset.get(f.trial_id, ""), [])
        out.append((mtime, _file_size_in_points(f, plan)))
    return out


def _file_size_in_points(f: StageFile, plan: list[tuple[int, ...]]) -> int:
    if f.kind == "compacted":
        return sum(map(len, plan)) if f.count == len(plan) else 0
    if f.kind == "shard" and f.count == len(plan) and f.index is not None:
        return len(plan[f.index])
    return 0


def points_done(files: list[tuple[StageFile, float]], plan: list[tuple[int, ...]]) -> int:
    """Certified points of one trial on storage (a compacted model's leftover shards aside)."""
    compacted = {f.setting_id for f, _ in files if f.kind == "compacted"}
    return sum(
        _file_size_in_points(f, plan)
        for f, _ in files
        if f.kind == "compacted" or f.setting_id not in compacted
    )


def by_trial(files: list[tuple[StageFile, float]]) -> dict[str, list[tuple[StageFile, float]]]:
    out: dict[str, list[tuple[StageFile, float]]] = {}
    for item in files:
        out.setdefault(item[0].trial_id, []).append(item)
    return out


def model_shards(files: list[StageFile]) -> dict[tuple[str, str], Shards]:
    """(trial_id, setting) -> its shards done and planned, from file names alone (a compacted
    model has all of its shards done; leftover shards beside it do not count)."""
    compacted = {f.model: f.count or 0 for f in files if f.kind == "compacted"}
    per_model = {m: Shards(k, k) for m, k in compacted.items()}
    for f in files:
        if f.kind == "shard" and f.model not in compacted:
            seen = per_model.get(f.model, Shards(0, f.count))
            per_model[f.model] = Shards(seen.done + 1, f.count)
    return per_model


def stage_shards(files: list[StageFile]) -> dict[str, Shards]:
    """trial_id -> its shards done and planned, over every setting (`model_shards`)."""
    out: dict[str, Shards] = {}
    for (trial_id, _), shards in model_shards(files).items():
        out[trial_id] = out.get(trial_id, Shards(0, 0)) + shards
    return out


def planned_shards(
    files: list[StageFile], per_setting: int, settings: int, pruned: set[str]
) -> tuple[Shards, int]:
    """(a trial's certification shards, the settings they count with points to certify): each
    setting on storage at its own count (a sweep certified under fixed σ and DDRS counts both,
    never 136 of 68), each planned setting not written yet at `per_setting`, and a setting the
    envelope strategy pruned the model under (`pruned`, its cert_ids) done: it has no shards
    and nothing is left to certify."""
    models = {setting: s for (_, setting), s in model_shards(files).items()}
    done = sum(min(s.done, s.total) if s.total else s.done for s in models.values())
    total = sum(s.total or s.done for s in models.values())
    gone = len(pruned - set(models))  # pruned and never certified: done, no points
    unwritten = max(0, settings - len(models) - gone)
    shards = Shards(done + gone * per_setting, total + (gone + unwritten) * per_setting)
    return shards, len(models) + unwritten


@dataclass(frozen=True)
class Progress:
    """What is on storage for one model and setting, from one listing."""

    compacted: bool
    shards: frozenset[int]  # shard numbers written (of `count`)
    other_counts: frozenset[int]  # shard counts other than the planned one


def _model_files(exp: Experiment, stage: str, trial_id: str, setting_id: str) -> list[StageFile]:
    return exp.stage_files(stage, within=exp.setting_dir(stage, trial_id, setting_id))


def _has_compacted(files: list[StageFile]) -> bool:
    return any(f.kind == "compacted" for f in files)


def progress(exp: Experiment, stage: str, trial_id: str, setting_id: str, count: int) -> Progress:
    files = _model_files(exp, stage, trial_id, setting_id)
    shards = [f for f in files if f.kind == "shard"]
    return Progress(
        _has_compacted(files),
        frozenset(f.index for f in shards if f.count == count and f.index is not None),
        frozenset(f.count for f in shards if f.count != count and f.count is not None),
    )


def all_compacted(exp: Experiment, trial_ids: list[str], settings: list[tuple[str, str]]) -> bool:
    """Whether every model's rows under every (stage, setting_id) are compacted: a command
    would compute nothing (the runner counts such a model done), so it need not start Ray."""
    return all(
        _has_compacted(_model_files(exp, stage, trial_id, setting_id))
        for trial_id in trial_ids
        for stage, setting_id in settings
    )
