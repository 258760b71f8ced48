"""Refreshing a stage's cache of compacted rows during a run, off the driver's loop.

The driver folds compacted models into the stage's cache as they arrive (geometrically: when
the models compacted since the last refresh reach a quarter of those cached, at least 16), so
that `status`, `envelope` and `report` read one file while a sweep runs. A refresh reads,
validates and (with a key) checks the attestation of every new file, then rewrites the cache:
seconds at a few hundred models. Run on the thread that polls Ray and drives Tune, it held up
both (issue 37's control plane: a quarter of the driver's samples over 644 models, most of them
while the last models certified, their compactions not submitted meanwhile). So a
`CacheRefresher` runs it on a thread of its own, one refresh at a time, and the loop goes on.

What the thread shares with the loop: nothing mutable. It is handed the statements the run's
compactions vouch for (a copy), and its result (the models cached) is read on the loop when it
is done. Every refresh in this process takes `REFRESHING`, so a refresh on the loop (the
final one, the envelope strategy's tie completions) never interleaves with one on the thread:
a file rewritten since would otherwise be covered with its old bytes' rows.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from sweeper.results.reader import refresh_cache
from sweeper.results.stage_table import StageTable
from sweeper.results.storage import Experiment
from sweeper.run.compaction import Compacted
from trainables.kernel.attestation import load_signing_key

log = logging.getLogger(__name__)

REFRESHING = threading.Lock()  # one refresh of any cache at a time in this process
MIN_FRESH = 16  # models compacted before a refresh is worth its rewrite of the cache


def refresh(
    exp: Experiment,
    stage: StageTable,
    rewritten: frozenset[str] = frozenset(),
    known: Mapping[str, dict] | None = None,
) -> int:
    """`reader.refresh_cache` under `REFRESHING`; returns how many models the cache holds."""
    with REFRESHING:
        return refresh_cache(exp, stage, rewritten, known)


class CacheRefresher:
    """The caches of one run's stages, refreshed on a thread as models are compacted
    (`compacted`), and once more on the caller's thread at the end (`finish`)."""

    def __init__(self, exp: Experiment):
        self.exp = exp
        self.fresh: Counter = Counter()  # stage -> models compacted since its cache was refreshed
        self.cached: Counter = Counter()  # stage -> models in its cache after the last refresh
        self.known: dict[str, dict] = {}  # statements the run's compactions vouch for
        key = load_signing_key()
        self.key_id = None if key is None else key.key_id  # the key a refresh checks with
        self._pool: ThreadPoolExecutor | None = None
        self._running: tuple[str, Future] | None = None  # the stage refreshing and its result

    def compacted(self, stage: StageTable, result: object) -> None:
        """A model of `stage` was compacted (`result`: its task's `Compacted`, whose
        statement a refresh takes as verified if signed with the key it checks with); starts
        a refresh on the thread when enough models are new and none is running."""
        if (
            isinstance(result, Compacted)
            and result.said is not None
            and self.key_id is not None
            and result.key_id == self.key_id
        ):
            self.known[result.digest] = result.said
        self.fresh[stage.name] += 1
        self.collect()
        if self._running is None and self.fresh[stage.name] >= self._due(stage.name):
            self._pool = self._pool or ThreadPoolExecutor(1, thread_name_prefix="cache-refresh")
            future = self._pool.submit(refresh, self.exp, stage, frozenset(), dict(self.known))
            self._running, self.fresh[stage.name] = (stage.name, future), 0

    def _due(self, stage: str) -> int:
        # geometric: the cache is rewritten O(log models) times over a run
        return max(MIN_FRESH, self.cached[stage] // 4)

    def collect(self, wait: bool = False) -> None:
        """Take the running refresh's result if it is done (`wait`: once it is)."""
        if self._running is None or not (wait or self._running[1].done()):
            return
        (stage, future), self._running = self._running, None
        if not self._took(stage, future.result):
            self.fresh[stage] += 1  # refreshed again at the end

    def finish(self, stages: list[StageTable]) -> None:
        """Once every task has ended: each stage's cache holds every compacted model."""
        self.collect(wait=True)
        for stage in stages:
            if self.fresh[stage.name]:
                self._took(
                    stage.name, functools.partial(refresh, self.exp, stage, known=self.known)
                )
                self.fresh[stage.name] = 0
        self.close()

    def _took(self, stage: str, refreshed: Callable[[], int]) -> bool:
        """Whether a refresh of `stage` succeeded (its model count kept); a failed one is only
        logged: a cache is an optimization, readers fall back to files."""
        try:
            self.cached[stage] = refreshed()
        except OSError as e:
            log.warning("could not refresh the %s cache: %s", stage, e)
            return False
        return True

    def close(self) -> None:
        """Let a refresh under way end (its write is atomic either way), and the thread."""
        self.collect(wait=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
