"""The results cache refreshed during a run off the driver's loop (`sweeper.run.cache_refresh`):
on a thread of its own, one refresh at a time, the last on the caller's thread, with the
statements of the run's own compactions (signed with the key the refresh checks with)."""

from __future__ import annotations

import threading

from sweeper.results.storage import Experiment
from sweeper.run import cache_refresh
from sweeper.run.cache_refresh import MIN_FRESH, CacheRefresher
from sweeper.run.certify_stage import CERTIFY
from sweeper.run.compaction import Compacted


def test_a_refresh_runs_on_its_own_thread_while_the_loop_goes_on_and_the_last_on_the_caller_s(
    tmp_path, monkeypatch, signing_env
):
    started, release, calls = threading.Event(), threading.Event(), []

    def slow(exp, stage, rewritten, known):
        held = cache_refresh.REFRESHING.locked()
        calls.append((threading.current_thread().name, held, dict(known or {})))
        started.set()
        assert release.wait(30)
        return 100 + len(calls)

    monkeypatch.setattr(cache_refresh, "refresh_cache", slow)
    caches = CacheRefresher(Experiment(str(tmp_path), "exp"))
    said = {"step": "compact", "trial_id": "t"}
    for k in range(MIN_FRESH):  # the 16th starts a refresh; compacted() never waits for it
        caches.compacted(CERTIFY, Compacted(2, f"ours{k}", said, signing_env.key_id))
    assert started.wait(30)
    caches.compacted(CERTIFY, Compacted(2, "other", said, "another key"))
    caches.compacted(CERTIFY, Compacted(2, "unsigned"))
    assert len(calls) == 1  # one at a time: none started while it runs
    name, held, known = calls[0]
    assert name.startswith("cache-refresh") and held
    assert set(known) == {f"ours{k}" for k in range(MIN_FRESH)}
    release.set()
    caches.finish([CERTIFY])  # waits for it, then folds the last two in on this thread
    assert [c[0] for c in calls] == [name, threading.current_thread().name]
    assert "other" not in calls[1][2] and "unsigned" not in calls[1][2]
    assert caches.cached["certify"] == 102 and caches.fresh["certify"] == 0


def test_a_refresh_that_cannot_write_is_a_warning_and_done_again_at_the_end(
    tmp_path, monkeypatch, caplog
):
    outcomes = [OSError("read-only file system"), 40]

    def flaky(exp, stage, rewritten, known):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(cache_refresh, "refresh_cache", flaky)
    caches = CacheRefresher(Experiment(str(tmp_path), "exp"))
    for k in range(MIN_FRESH):
        caches.compacted(CERTIFY, Compacted(2, f"d{k}"))
    caches.collect(wait=True)
    assert "could not refresh the certify cache: read-only file system" in caplog.text
    assert caches.fresh["certify"] == 1  # owed: the end refreshes it
    caches.finish([CERTIFY])
    assert caches.cached["certify"] == 40 and outcomes == []
