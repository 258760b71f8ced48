"""The halving scheduler's proxy, as a trial's settings (`ProxyPart` of `TrialConfig`): every
`proxy_every` epochs the trial certifies `proxy_points` inputs carved from its training split
with `proxy_n` draws (`trainables.proxy`), for sweeper's `--halving` (`sweeper.run.halving`).
The carve changes what the trial trains on, so the settings are part of its trial_id when on,
and nothing of it when off. Pure Python, as the rest of the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainables.kernel.config_parts import bounded
from trainables.kernel.settings import AtLeast, setting

PROXY_POINTS = 200  # the proxy's validation inputs (`proxy_points`), when on
PROXY_N = 100  # its CERTIFY draws per input (`proxy_n`)


@dataclass(frozen=True)
class ProxyPart:
    """The proxy's settings; `proxy_every` None (the default) turns it off."""

    proxy_every: int | None = setting(
        None,
        "Every this many epochs, certify on a validation split carved from the training set "
        "(the halving scheduler's proxy; null: off, nothing carved).",
        AtLeast(1),
    )
    proxy_points: int | None = setting(
        None, "Validation inputs the proxy holds out of training (null: 200).", AtLeast(1)
    )
    proxy_n: int | None = setting(
        None, "The proxy's CERTIFY draws per validation input (null: 100).", AtLeast(10)
    )

    def proxy_problems(self, epochs: int) -> list[str]:
        p = bounded(ProxyPart, self, None)
        every = self.proxy_every
        if isinstance(every, int) and isinstance(epochs, int) and every >= epochs >= 1:
            p.append(
                f"proxy_every ({every}) must be below epochs ({epochs}): the proxy would be "
                "measured only after the last epoch, when there is nothing left to halt"
            )
        return p

    def proxy_resolved(self) -> dict[str, Any]:
        """The proxy's defaults when it is on, nothing of it when off (not in the trial_id)."""
        if self.proxy_every is None:
            return {"proxy_points": None, "proxy_n": None}
        return {
            "proxy_points": PROXY_POINTS if self.proxy_points is None else self.proxy_points,
            "proxy_n": PROXY_N if self.proxy_n is None else self.proxy_n,
        }
