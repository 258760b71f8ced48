"""What failed in a run, grouped so that a person can act on it: one entry per trial and stage
(its first telling line, how many tasks or attempts hit it) in `failures.json`, the full text of
every failure in `logs/failures-<time>.log`. Written by the driver as failures happen (both
files are small and rewritten whole, atomically, so object stores work too); read by
`sweeper status`. A run starts with an empty `failures.json`: it holds the last run's failures,
and (`retried`) how many failures each trial and stage had charged to its errors and to its node
losses, the two budgets of `sweeper.run.retries`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

from sweeper.results.storage import Experiment
from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError

log = logging.getLogger(__name__)


@dataclass
class Failure:
    """One trial's failures in one stage ("train", "certify", "empirical")."""

    trial_id: str
    stage: str
    message: str  # the line that says what went wrong
    count: int = 1  # tasks (shards, compactions) or training attempts that failed
    first: float = 0.0  # when

    def line(self) -> str:
        """`RuntimeError: ... (3 shards)`: the message and how many tasks hit it."""
        unit = "attempts" if self.stage == "train" else "tasks"
        return self.message + (f" ({self.count} {unit})" if self.count > 1 else "")


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # Ray colours the task names in its tracebacks
LONG = 160  # characters: a longer first line is cut at its first sentence


def first_line(text: str) -> str:
    """The line of an error's text that says what went wrong: the exception, which Python and
    Ray print last (after the traceback), else the first non-empty line; its exception's name
    without the module path, and a long one cut after its first sentence."""
    lines = [ln.strip() for ln in ANSI.sub("", text).strip().splitlines() if ln.strip()]
    exceptions = [ln for ln in lines if ln.split(":", 1)[0].endswith(("Error", "Exception"))]
    line = (exceptions or lines or ["failed (no message)"])[-1]
    name, sep, rest = line.partition(":")
    if sep and " " not in name:
        line = name.rsplit(".", 1)[-1] + sep + rest
    if len(line) > LONG and ". " in line:
        line = line[: line.index(". ") + 1]
    return line if len(line) <= 2 * LONG else line[: 2 * LONG - 1] + "…"


class FailureLog:
    """The failures of one run; `add` records one (grouped) and rewrites both files."""

    def __init__(self, exp: Experiment):
        self.exp = exp
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.failures: dict[tuple[str, str], Failure] = {}
        self.texts: list[str] = []
        self.retried: dict[str, dict[str, dict[str, int]]] = {}  # budget -> trial -> stage -> n
        self._written = False

    def start(self) -> None:
        """A new run: the previous run's grouped failures no longer stand (its log stays)."""
        if fileio.exists(self.exp.failures_json):
            self._write_json()

    def add(self, trial_id: str, stage: str, text: str, count: int = 1) -> Failure:
        key = (trial_id, stage)
        if key in self.failures:
            self.failures[key].count += count
        else:
            self.failures[key] = Failure(trial_id, stage, first_line(text), count, time.time())
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self.texts.append(f"=== {stamp} trial {trial_id}, {stage}\n{ANSI.sub('', text).rstrip()}\n")
        try:
            fileio.write_bytes_atomic(self.log_path, "\n".join(self.texts).encode())
            self._write_json()
        except OSError as e:  # the failure itself is still reported at the end of the run
            log.warning("could not record a failure under %s: %s", self.exp.root, e)
        return self.failures[key]

    def charge(self, trial_id: str, stage: str, budget: str) -> int:
        """One failure charged to `budget` ("errors" or "node_losses", `sweeper.run.retries`):
        counted per trial and stage in failures.json's `retried` (the work may have run again,
        so `add` records only what ends it); returns the count."""
        counts = self.retried.setdefault(budget, {}).setdefault(trial_id, {})
        counts[stage] = counts.get(stage, 0) + 1
        try:
            self._write_json()
        except OSError as e:  # a count only: the run goes on
            log.warning("could not record a retry under %s: %s", self.exp.root, e)
        return counts[stage]

    @property
    def log_path(self) -> str:
        return self.exp.failures_log(self.stamp)

    def _write_json(self) -> None:
        doc: dict[str, Any] = {
            "log": self.exp.relative(self.log_path) if self.texts else None,
            "failures": [asdict(f) for f in self.failures.values()],
        }
        if self.retried:
            doc["retried"] = self.retried
        fileio.write_bytes_atomic(self.exp.failures_json, json.dumps(doc, indent=1).encode())

    def rows(self) -> list[tuple[str, str, str]]:
        """(trial_id, stage, line) per trial and stage, in the order they first failed."""
        return [(f.trial_id, f.stage, f.line()) for f in self.failures.values()]


# Bytes: an entry per trial and stage of ~0.3 kB (a message of at most 320 characters, ~2 kB
# escaped), so a sweep of 644 trials writes at most ~4 MB; this bounds ~10,000 trials.
FAILURES_JSON_MAX = 64 * 2**20
FIELDS: dict[str, type | tuple[type, ...]] = {
    "trial_id": str,
    "stage": str,
    "message": str,
    "count": int,
    "first": (int, float),
}


class FailuresError(ProblemsError):
    """A failures.json that cannot be read (no regular file, too large, not what `FailureLog`
    writes): one line naming it and the fix."""


def read_failures(exp: Experiment) -> tuple[dict[tuple[str, str], Failure], str | None]:
    """The last run's failures by (trial_id, stage), and its log's path (None: none; no
    failures.json: none either); FailuresError naming the file if it is not one."""
    path = exp.failures_json
    try:
        doc = json.loads(fileio.read_bytes(path, FAILURES_JSON_MAX))
        why = _failures_problem(doc)
    except FileNotFoundError:
        return {}, None
    except fileio.UnreadableFileError as e:
        why = e.why
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        why = f"not JSON: {str(e).splitlines()[0]}"
    if why is not None:
        raise FailuresError(
            [
                f"cannot read {path} ({why}): delete it (it lists the last run's failures; "
                "their full text stays under logs/) and re-run"
            ]
        )
    failures = [Failure(**f) for f in doc["failures"]]
    where = fileio.join(exp.root, *doc["log"].split("/")) if doc.get("log") else None
    return {(f.trial_id, f.stage): f for f in failures}, where


def _failures_problem(doc: Any) -> str | None:
    """Why `doc` is not what `FailureLog` writes (None: it is)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("failures"), list):
        return "not a JSON object with a list of failures"
    if not isinstance(doc.get("log") or "", str):
        return "log is not a path"
    for f in doc["failures"]:
        if not isinstance(f, dict) or set(f) != set(FIELDS):
            return f"a failure without exactly {', '.join(FIELDS)}"
        wrong = [k for k, kind in FIELDS.items() if type(f[k]) not in _tuple(kind)]
        if wrong:
            return f"a failure whose {wrong[0]} {f[wrong[0]]!r:.40} is not one"
    return None


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
