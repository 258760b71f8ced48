"""The storage layout of one experiment (a local path or a URI such as s3://bucket/prefix):

<storage>/<experiment>/
  sweep.json                                   the resolved sweep, written before Ray starts
  lease.json, .lease.lock                      which driver holds the experiment (`lease`)
  tune/run-<time>/                             Ray Tune's directory for each `sweeper run`
  trials/<trial_id>/checkpoint.pt, trial.json  newest epoch's checkpoint and the trial's state
  certify/<trial_id>/<cert_id>/shard-00003-of-00010.parquet    a shard of a model's rows
  certify/<trial_id>/<cert_id>/compacted-of-00010.parquet      all 10 of them, once complete
  certify/<trial_id>/<cert_id>/memory.parquet                  (DDRS, written before
                                                   compaction existed; `sweeper compact` folds it)
  empirical/<trial_id>/<emp_id>/shard-...parquet, compacted-...parquet   the attack stage, alike
  cache/<stage>.parquet                        the compacted rows of many models in one file
  failures.json, logs/failures-<time>.log      the last run's failures grouped; each one's full text
  retired/<time>/trials/<trial_id>/...         what `--retrain` moved aside (never deleted)
  reports/                                     tables and figures

Nothing outside `<storage>/<experiment>/` is ever written: an experiment name is one plain path
component (`plain_name_problem`), the experiment's resolved root must lie strictly inside the
storage (a symlink out of it is refused), a local URI names an absolute path, and a storage
URI may not carry credentials. Constructing an `Experiment` checks all four and raises
`StorageError` (bad input, exit 2); for local storage it also confines every later write of
the process below the storage (`fileio.confine`: a symlink planted inside is refused, never
followed).

Every stage (certify, empirical) keeps one directory per model and setting. Each kind of file
has its own name pattern, and a glob of one kind (`Experiment.glob`) is one table of one
schema: `<stage>/*/*/compacted-of-*.parquet` is every finished model's rows, what pandas,
DuckDB or polars should read (for DDRS the sound, memory-adjusted certificates;
docs/guide/reading-results.md); `shard-*-of-*.parquet` the rows of models still being computed
(for DDRS not yet sound, and a crash may leave shards beside a compacted file);
`memory.parquet` the legacy DDRS memory pass, another schema (`sweeper compact` folds an old
experiment's into compacted files and deletes them). This module is the only one that spells
paths or reads them back.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from sweeper.results.credentials import credentials_problem
from sweeper.results.credentials import redact as redact  # re-exported: imported from here
from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError

DEFAULT_STORAGE = os.environ.get("SWEEPER_STORAGE", "results")
SHARD_RE = re.compile(r"shard-(\d{5})-of-(\d{5})\.parquet$")
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
COMPACTED_RE = re.compile(r"compacted-of-(\d{5})\.parquet$")
STAGES = ("certify", "empirical")
MEMORY = "memory.parquet"  # DDRS memory pass of experiments written before compaction
# One name pattern per kind of file (SHARD_RE, COMPACTED_RE and MEMORY read them back).
KIND_GLOBS = {
    "compacted": "compacted-of-*.parquet",
    "shard": "shard-*-of-*.parquet",
    "memory": MEMORY,
}
_ID = re.compile(r"[0-9a-f]{12}")


class StorageError(ProblemsError):
    """A storage location or experiment name that would reach outside the storage, or leak
    credentials into stored state; `problems` has one line each."""


def plain_name_problem(name: str, what: str) -> str | None:
    """Why `name` cannot be one path component under the storage (None: it can)."""
    if PLAIN_NAME.fullmatch(name or ""):
        return None
    return (
        f"{what} {name!r}: expected a plain name (letters, digits, '.', '_', '-'; not starting "
        "with '.'; no '/'; at most 128 characters), e.g. cifar10-run2"
    )


def storage_problem(storage: str) -> str | None:
    """Credentials in a storage URI (`sweeper.results.credentials`: userinfo, a secret query
    parameter, userinfo inside `endpoint_override=`): they would be written to trial.json and
    Ray Tune's state. A plain path is never a problem (`/data/user@host` is a directory)."""
    if "://" not in str(storage):
        return None
    why = "they would be stored in trial.json and Ray Tune's state"
    fix = (
        "give s3://bucket/prefix and set the credentials the AWS way, in the environment "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a profile (AWS_PROFILE) or the node's "
        "instance profile"
    )
    return credentials_problem("--storage", storage, why, fix)


def check_storage(storage: str) -> None:
    """Raise StorageError if `storage` cannot be used as given."""
    problem = storage_problem(storage)
    if problem:
        raise StorageError([problem])


@dataclass(frozen=True)
class StageFile:
    """A file of a stage, as its path says: a shard, a model's compacted rows, or a (legacy)
    DDRS memory file of one model (trial_id) under one setting (setting_id)."""

    path: str
    stage: str
    trial_id: str
    setting_id: str
    kind: str  # "shard" | "compacted" | "memory"
    index: int | None = None  # shard k of `count`
    count: int | None = None  # shards of the model (a compacted file: how many it folded)
    size: int = 0  # bytes

    @property
    def model(self) -> tuple[str, str]:
        return (self.trial_id, self.setting_id)


def by_model(files: list[StageFile]) -> dict[tuple[str, str], list[StageFile]]:
    """A stage's files grouped by model: (trial_id, setting_id) -> its files."""
    groups: dict[tuple[str, str], list[StageFile]] = defaultdict(list)
    for f in files:
        groups[f.model].append(f)
    return groups


def shard_name(index: int, count: int) -> str:
    """`shard-00003-of-00010.parquet`: the file of shard `index` of `count` (SHARD_RE reads it)."""
    return f"shard-{index:05d}-of-{count:05d}.parquet"


def index_chunks(
    num_test: int, skip: int, max_points: int | None, shard_size: int
) -> list[tuple[int, ...]]:
    """Every `skip`-th test point, at most `max_points` of them (the paper: every 20th, 500),
    cut into shards of `shard_size`; certification and the empirical stage split alike."""
    return chunked(list(range(0, num_test, skip))[:max_points], shard_size)


def chunked(indices: list[int], shard_size: int) -> list[tuple[int, ...]]:
    """Test points `indices` cut into shards of `shard_size` (a setting's `test_points`)."""
    return [tuple(indices[i : i + shard_size]) for i in range(0, len(indices), shard_size)]


@dataclass(frozen=True)
class Experiment:
    """`<storage>/<name>`; constructing one checks that it stays inside the storage (raises
    StorageError: a name that is not plain, a root that resolves elsewhere, credentials)."""

    storage: str
    name: str

    def __post_init__(self) -> None:
        check_storage(self.storage)
        local = fileio.local_uri_problem(self.storage)
        problem = f"--storage {local}" if local else plain_name_problem(self.name, "--experiment")
        if problem is None and not fileio.is_uri(self.storage):
            problem = outside_problem(self.base, self.root)
        if problem:
            raise StorageError([problem])
        if not fileio.is_uri(self.storage):
            fileio.confine(self.base)  # no write below the storage follows a planted link

    @functools.cached_property
    def base(self) -> str:
        """The storage as an absolute local path, or the URI."""
        if fileio.is_uri(self.storage):
            return self.storage
        return str(fileio.local_path(self.storage).absolute())

    @functools.cached_property
    def root(self) -> str:  # cached: readers resolve thousands of paths below it
        return fileio.join(self.base, self.name)

    @property
    def sweep_json(self) -> str:
        return fileio.join(self.root, "sweep.json")

    @property
    def lease_json(self) -> str:
        return fileio.join(self.root, "lease.json")

    @property
    def search_json(self) -> str:
        """The envelope search's record: what it trained, why, where it stopped, the audit."""
        return fileio.join(self.root, "search.json")

    @property
    def tune_dir(self) -> str:
        return fileio.join(self.root, "tune")

    @property
    def certify_dir(self) -> str:
        return self.stage_dir("certify")

    def stage_dir(self, stage: str) -> str:
        return fileio.join(self.root, stage)

    def setting_dir(self, stage: str, trial_id: str, setting_id: str) -> str:
        return fileio.join(self.root, stage, trial_id, setting_id)

    def memory_path(self, trial_id: str, cert_id: str) -> str:
        """A DDRS model's memory pass, as experiments before compaction wrote it."""
        return fileio.join(self.setting_dir("certify", trial_id, cert_id), MEMORY)

    def pilot_path(self, trial_id: str, cert_id: str, stage: int) -> str:
        """The `envelope` strategy's pilot draws of one model at one pilot stage (1: with the
        selection), never read as certification rows (no shard or compacted name)."""
        name = f"pilot-{stage:02d}.parquet"
        return fileio.join(self.setting_dir("certify", trial_id, cert_id), name)

    def envelope_record(self, trial_id: str, cert_id: str) -> str:
        """The `envelope` strategy's verdict on one model and its upper bounds."""
        return fileio.join(self.setting_dir("certify", trial_id, cert_id), "envelope.json")

    def arrivals_json(self, cert_id: str) -> str:
        """The order models arrived in under the `envelope` strategy (each one's δ share)."""
        return fileio.join(self.root, "envelope", f"{cert_id}-arrivals.json")

    def compacted_path(self, stage: str, trial_id: str, setting_id: str, count: int) -> str:
        """The model's rows once all `count` shards are folded together."""
        name = f"compacted-of-{count:05d}.parquet"
        return fileio.join(self.setting_dir(stage, trial_id, setting_id), name)

    @property
    def failures_json(self) -> str:
        """The last run's failures, one entry per trial and stage (`sweeper.results.failures`)."""
        return fileio.join(self.root, "failures.json")

    def failures_log(self, stamp: str) -> str:
        """The full text of every failure of the run started at `stamp`."""
        return fileio.join(self.root, "logs", f"failures-{stamp}.log")

    def retired_dir(self, stamp: str) -> str:
        """Where `--retrain` moves a trial's old checkpoint and results (never deleted)."""
        return fileio.join(self.root, "retired", stamp)

    def glob(self, stage: str = "certify", kind: str = "compacted") -> str:
        """Every file of one kind of `stage` as one glob pattern, e.g.
        `<root>/certify/*/*/compacted-of-*.parquet`: one table of the stage's schema (see the
        module docstring), for DuckDB's read_parquet, polars or Python's glob."""
        return fileio.join(self.stage_dir(stage), "*", "*", KIND_GLOBS[kind])

    def cache_path(self, stage: str) -> str:
        return fileio.join(self.root, "cache", f"{stage}.parquet")

    def stage_files(
        self, stage: str, within: str | None = None, links: list[str] | None = None
    ) -> list[StageFile]:
        """Every shard, compacted and memory file of `stage` (of one model and setting if
        `within` is its setting directory), from one listing; anything else is ignored, and
        so is a link inside the (local) storage, never followed (each added to `links`)."""
        out, head = [], len(self.stage_dir(stage))
        listed = fileio.list_sizes(within or self.stage_dir(stage), ".parquet", links)
        for f, size in sorted(listed.items()):
            parsed = self._parse(stage, f, size, f[head:])
            if parsed is not None:
                out.append(parsed)
        return out

    def relative(self, path: str) -> str:
        """`path` relative to the experiment root (as a cache records the files it holds)."""
        return path[len(self.root) :].replace("\\", "/").lstrip("/")

    def parse_stage_file(self, stage: str, path: str, size: int = 0) -> StageFile | None:
        """What a path under the stage directory is (None: not a file of the layout)."""
        return self._parse(stage, path, size, path[len(self.stage_dir(stage)) :])

    def _parse(self, stage: str, path: str, size: int, tail: str) -> StageFile | None:
        rel = tail.replace("\\", "/").strip("/").split("/")
        if len(rel) != 3 or not _ID.fullmatch(rel[0]):
            return None
        trial_id, setting_id, name = rel
        if name == MEMORY:
            return StageFile(path, stage, trial_id, setting_id, "memory", size=size)
        if m := COMPACTED_RE.fullmatch(name):
            return StageFile(path, stage, trial_id, setting_id, "compacted", None, int(m[1]), size)
        if m := SHARD_RE.fullmatch(name):
            return StageFile(path, stage, trial_id, setting_id, "shard", int(m[1]), int(m[2]), size)
        return None

    @property
    def reports_dir(self) -> str:
        return fileio.join(self.root, "reports")

    def report_dir(self, only: str | None) -> str:
        """reports/, or reports/only-<slice>/ for a slice (the whole report stays intact). The
        slice's name is one path component whatever --only holds: ASCII letters, digits and
        `.=_-` only, and a long one is cut and told apart by a hash of the whole."""
        if not only:
            return self.reports_dir
        name = "only-" + re.sub(r"[^A-Za-z0-9.=_-]+", "_", only.strip())
        if len(name) > 100:
            name = f"{name[:80]}-{hashlib.sha256(only.encode()).hexdigest()[:12]}"
        return fileio.join(self.reports_dir, name)

    def trial_dir(self, trial_id: str) -> str:
        # Spelled by the kernel: trial processes (which import no sweeper) write there too.
        from trainables.kernel.trial_status import trial_dir

        return trial_dir(self.root, trial_id)

    def checkpoint(self, trial_id: str) -> str:
        # Imported here: trainables.checkpoint pulls in torch, which `sweeper envelope` and
        # `sweeper status` do not need (it took most of their start-up time).
        from trainables.checkpoint import CHECKPOINT_NAME

        return fileio.join(self.trial_dir(trial_id), CHECKPOINT_NAME)

    def shard_path(
        self, trial_id: str, setting_id: str, shard: int, num_shards: int, stage: str = "certify"
    ) -> str:
        return fileio.join(
            self.setting_dir(stage, trial_id, setting_id), shard_name(shard, num_shards)
        )

    def exists(self) -> bool:
        return fileio.exists(self.sweep_json)

    def link_problems(self) -> list[str]:
        """A line per symlink planted inside the (local) experiment, and per hard-linked or
        special file (FIFO, socket, device) under `tune/`: a command that writes refuses to
        start. Ray Tune writes under `tune/` itself, in place (not through `fileio`'s rename),
        so a file there that is another file's name too would be overwritten outside."""
        if fileio.is_uri(self.root) or not os.path.isdir(self.root):
            return []
        problems = [
            f"{link} is a symlink inside the experiment: sweeper never writes through a link "
            "inside the storage; remove it (or move the real directory there) and re-run"
            for link in fileio.links_below(self.root)
        ]
        return problems + [
            f"{path} is {what} under the experiment's tune/, which Ray Tune writes in place: "
            "remove it and re-run"
            for path, what in _unsafe_tune_files(fileio.local_path(self.tune_dir))[:5]
        ]


def _unsafe_tune_files(tune: Path) -> list[tuple[str, str]]:
    """(path, what it is) of every entry under `tune` that is neither a directory nor a
    regular file with one name (links are `links_below`'s)."""
    found = []
    for top, dirs, files in os.walk(tune):
        for name in [*dirs, *files]:
            path = os.path.join(top, name)
            mode = os.lstat(path)
            if stat.S_ISLNK(mode.st_mode) or stat.S_ISDIR(mode.st_mode):
                continue
            if not stat.S_ISREG(mode.st_mode):
                found.append((path, "not a regular file"))
            elif mode.st_nlink > 1:
                found.append((path, f"a hard link ({mode.st_nlink} names)"))
    return found


def experiments(storage: str) -> list[str]:
    """Names of the experiments under `storage` (directories holding a sweep.json), oldest
    sweep.json first; one listing of the storage's top level, not of everything below it."""
    import pyarrow.fs as pafs

    fs, base = fileio.filesystem(storage)
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    folders = [
        i.base_name
        for i in fs.get_file_info(pafs.FileSelector(base))
        if i.type == pafs.FileType.Directory
    ]
    infos = fs.get_file_info([f"{base.rstrip('/')}/{name}/sweep.json" for name in folders])
    found = [
        (i.mtime_ns or 0, name)
        for i, name in zip(infos, folders, strict=True)
        if i.type == pafs.FileType.File
    ]
    return [name for _, name in sorted(found)]


def outside_problem(storage: str, root: str) -> str | None:
    """Why the local `root` does not resolve to a directory strictly inside `storage` (a
    symlinked experiment pointing elsewhere), or None."""
    base, real = os.path.realpath(storage), os.path.realpath(root)
    if os.path.commonpath([base, real]) == base and real != base:
        return None
    return (
        f"--experiment: {root} resolves to {real}, outside the storage {base}: "
        "remove the link or pass another --experiment"
    )
