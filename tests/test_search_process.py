"""One radius's Gaussian process and its kriging believer (`sweeper.run.search_process`)."""

from __future__ import annotations

import numpy as np
import pytest

from sweeper.run.search_process import Believer, Process


@pytest.mark.parametrize("believed", [1.02, 1.1, -0.02])
def test_a_believed_accuracy_past_0_or_1_is_weighed_as_one_at_the_bound(believed):
    """A pending model's believed accuracy is the process's prediction, which can pass 0 or 1;
    weighed by p(1 − p) it had a negative variance, and on a process with little white noise
    the believer's factorisation failed (LinAlgError: it ended a sweep's driver, found by
    `benchmarks/sweep_scale.py --search`). It is weighed as an accuracy at the bound."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 3))
    y = 0.5 + 0.3 * np.sin(3 * x[:, 0])  # smooth: the white noise at its floor
    seen = Process(x, y, points=500)
    assert seen.noise < 1e-5
    pending = np.repeat(x[:10], 3, axis=0)  # three seeds of each of ten trained points
    at_bound = 1.0 if believed > 1 else 0.0
    at = x[:10]  # the pending points themselves: their means move toward what is believed
    got = Believer(seen, pending, np.full(30, believed), points=500).predict(at)
    bound = Believer(seen, pending, np.full(30, at_bound), points=500).predict(at)
    np.testing.assert_allclose(got[1], bound[1], rtol=1e-9)  # weighed alike
    assert (
        np.isfinite(got[0]).all()
        and (np.sign(got[0] - bound[0]) == np.sign(believed - at_bound)).all()
    )
