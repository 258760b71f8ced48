"""The launcher's signals (`sweeper.run.launch`): Ctrl-C and SIGTERM stop a run wherever it is,
in Tune or in the certification that follows it (or, under the search, between Tune's rounds)."""

from __future__ import annotations

import signal

from ray.tune.tune import _setup_signal_catching

from sweeper.run import launch


class Tuner:
    """A Tuner whose fit installs Tune's own SIGINT and SIGUSR1 handlers, as `tune.run`
    does, and returns without a signal (Tune then leaves them installed)."""

    def fit(self):
        _setup_signal_catching()


def test_after_tune_ctrl_c_has_the_handler_it_had_before():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGUSR1)}
    assert before[signal.SIGINT] is signal.default_int_handler  # Ctrl-C: KeyboardInterrupt
    try:
        Tuner().fit()
        assert signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]  # Tune's, left
    finally:
        for s, h in before.items():
            signal.signal(s, h)
    launch._tune_fit(Tuner())
    assert {s: signal.getsignal(s) for s in before} == before


class Certifier:
    """Certification whose wait is interrupted (Ctrl-C, or SIGTERM made one)."""

    def __init__(self):
        self.calls: list[str] = []

    def wait(self):
        self.calls.append("wait")
        raise KeyboardInterrupt

    def finish(self):
        self.calls.append("finish")

    def cancel(self):
        self.calls.append("cancel")


def test_ctrl_c_while_certification_ends_cancels_it_and_says_interrupted():
    certifier = Certifier()
    assert launch._settle(certifier, None, interrupted=False) is True
    assert certifier.calls == ["wait", "cancel"]
    done = Certifier()
    assert launch._settle(done, None, interrupted=True) is True and done.calls == ["cancel"]


def test_without_a_signal_certification_is_waited_for_and_finished():
    certifier = Certifier()
    certifier.wait = lambda: certifier.calls.append("wait")  # type: ignore[method-assign]
    assert launch._settle(certifier, None, interrupted=False) is False
    assert certifier.calls == ["wait", "finish"]


def test_sigterm_while_sweeper_certify_waits_cancels_it_and_says_interrupted(monkeypatch):
    """SIGTERM (a scheduler's) during `sweeper certify`'s wait: turned into Ctrl-C, the tasks
    cancelled, the run interrupted (exit 130), not the process killed where it stood."""
    import os
    import time

    class Terminated(Certifier):
        def submit(self, cfg):
            self.calls.append("submit")

        def failure_rows(self):
            return []

        def wait(self):
            self.calls.append("wait")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the signal's KeyboardInterrupt ends this at once

    certifier = Terminated()
    monkeypatch.setattr(launch, "_certifier", lambda *a, **kw: certifier)
    monkeypatch.setattr(launch, "per_process", lambda resources, trials: resources)
    outcome = launch.certify_trials(None, [object()], None, launch.Resources(), print)
    assert outcome.interrupted and certifier.calls == ["submit", "wait", "cancel"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
