"""The room the envelope search leaves on the cluster (`search_tune`): how many trials it
trains at once while curves are awaited (`Slots`), how many Ray Tune keeps pending
(`one_pending`), and how long Tune may wait in its searcher loop for a curve (`TUNE_WAIT_S`,
`tune_catches_signals`) rather than end its round."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# How long Tune may wait in its searcher loop for a curve before the search ends its round. A
# wait that has room (`capacity.certification_room`) ends when the curves come: a warm curve
# comes in about 2 s, in 5-20 s behind a queue of certification (the stand-in's 644 trials,
# `benchmarks/sweep_scale.py --search`), in minutes on a GPU. The bound is for what the room
# check cannot see; a round's restart costs about 6 s on 2 cores (8 trial actors, each a new
# process importing Tune), small beside a minute. A wait without room ends its round at once.
TUNE_WAIT_S = 60.0
# How long a poll of certification waits for a task to end while Tune waits on the search (its
# searcher loop blocked in `suggest`): how soon a Ctrl-C, the room gone or `TUNE_WAIT_S` is seen.
IN_TUNE_POLL_S = 0.25


@dataclass(frozen=True)
class Slots:
    """How many trials the search trains at once: at most `cap`, and while models await their
    curves, `reserve` of the cluster's `total` trial slots (one per awaiting model) left free so
    their certification starts. With no curve awaited every slot trains: a small machine is not
    left half idle (on 2 slots a fixed reservation trained one trial at a time)."""

    total: int
    cap: int
    reserve: int

    def open(self, running: int, awaiting: int) -> bool:
        """Whether another trial may start beside `running` while `awaiting` curves are due."""
        return running < self.cap and running < self.total - min(self.reserve, awaiting)

    @property
    def reuse(self) -> bool:
        """Whether Tune may keep an ended trial's actor for the next trial: while the search
        waits it keeps one idle, on a slot of the reserve, and certification needs one left."""
        return self.reserve >= 2


def search_slots(trial_slots: int, asked: int | None) -> Slots:
    """The search's `Slots` on a cluster of `trial_slots`: a quarter of them (at least one, none
    of a single slot) kept for certification while curves are awaited; `asked`
    (--max-concurrent) caps the trials."""
    reserve = max(1, trial_slots // 4) if trial_slots > 1 else 0
    return Slots(trial_slots, min(trial_slots, asked) if asked else trial_slots, reserve)


def tune_catches_signals() -> bool:
    """Whether Ray Tune's own SIGINT handler is installed (Ray 2.60's
    `tune.tune._setup_signal_catching`): from the start of a Tune run in the main thread until
    a Ctrl-C (or SIGUSR1) comes, when it puts back the handler before it
    (tests/test_search_tune.py). Tune's searcher loop does not look at what it caught."""
    handler = signal.getsignal(signal.SIGINT)
    return getattr(handler, "__name__", "") == "signal_interrupt_tune_run"


PENDING_ENV = "TUNE_MAX_PENDING_TRIALS_PG"  # Ray Tune's, read when a Tune run starts


@contextmanager
def one_pending() -> Iterator[None]:
    """Ray Tune keeping one trial pending under the search, unless the user set
    `TUNE_MAX_PENDING_TRIALS_PG`. Tune's "auto" keeps as many pending as the concurrency
    limit allows live, requests a new actor for each and drops the request when an ended
    trial's actor takes the trial; where the cluster has free room (certification's reserve)
    a request's actor process starts first. Measured on the stand-in's search (trials that
    take no time, docs/guide/envelope-search.md): 23 actors created for 183 trials that 3 of
    them ran; 7-8 with one pending. The search proposes as its slots free, and a proposal
    staged ahead is only one decided on fewer curves. The cost: trials that could start
    together start an actor's start apart (Tune asks for the next once the pending one runs);
    the autoscaler is asked for the trials to come by the launcher (`capacity.Capacity`)."""
    if PENDING_ENV in os.environ:
        yield
        return
    os.environ[PENDING_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(PENDING_ENV, None)
