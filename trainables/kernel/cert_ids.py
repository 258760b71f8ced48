"""A certification setting's name, its `cert_id`, written and read in this module only.

A cert_id names a model's certification files (`certify/<trial_id>/<cert_id>/`), so its
spelling is fixed: every file written so far must keep its name. `CertId` is the typed
setting it spells; `CertId.text` writes it and `CertId.parse` reads it back, and only the
spelling `text` writes parses (numbers printed with `:g`, so `n-0100` or `alpha-1e-3` name
nothing). Two kinds:

- the driver's (`CertifySpec.cert`): `sigma-<σ|train>_n0-<n0>_n-<n>_alpha-<α>_skip-<k>_max-<m|all>`,
  then a segment per non-default way the base classifier ran (`_prec-<p>`, `_cl`,
  `_compiled`), the envelope strategy's (`_envelope`, then `-delta-<δ>`, `-pilots-<a>-<b>…`
  and `-radii-<r>-…` where not the defaults) and DDRS's (`_ddrs-K<K>-lr<lr>-n<n>-min<σ>`);
- `sweeper import`'s (`CertId.imported_from`): `imported-sigma-<σ>-n-<n>-alpha-<α>` (the
  published logs say neither n0 nor which test points).

Pure Python, as the rest of the kernel: the driver names and reads, the workers seed from it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass

from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.kernel.run_modes import PRECISIONS

ENVELOPE_MARK = "_envelope"  # begins the segment of strategy envelope (`Envelope.tag`)
IMPORTED_PREFIX = "imported-"  # begins every cert_id `sweeper import` writes
DECISION_RADII = tuple(round(0.25 * t, 10) for t in range(10))  # envelope's default: 0:2.25:0.25
DEFAULT_DELTA = 0.01  # the envelope strategy's δ, left out of its segment
_RUN_TAGS = {"cl": "channels_last", "compiled": "compile"}  # segment -> CertId field
_OWN_KEYS = ("sigma", "n0", "n", "alpha", "skip", "max")  # the fixed segments, in order
_ENVELOPE_PARTS = re.compile(r"-(delta|pilots|radii)-")
_DDRS = re.compile(r"ddrs-K(\d+)-lr(.+)-n(\d+)-min(.+)")
_IMPORTED = re.compile(r"imported-sigma-(.+)-n-(\d+)-alpha-(.+)")


def strategy_of(cert_id: str) -> str:
    """The strategy a cert_id names: `envelope` when it carries `ENVELOPE_MARK`, else `full`
    (a test on the text, as the reads do on a whole column)."""
    return "envelope" if ENVELOPE_MARK in cert_id else "full"


def is_imported(cert_id: str) -> bool:
    """Whether `sweeper import` wrote `cert_id` (a test on its prefix)."""
    return cert_id.startswith(IMPORTED_PREFIX)


@dataclass(frozen=True)
class Envelope:
    """The envelope strategy's part of a cert_id: δ, the pilot stages (None: 1%, 3%, 10%, 30%
    of n) and the decision radii (None: `DECISION_RADII`)."""

    delta: float = DEFAULT_DELTA
    pilots: tuple[int, ...] | None = None
    radii: tuple[float, ...] | None = None

    @property
    def tag(self) -> str:
        """`_envelope`, then `-delta-<δ>`, `-pilots-…` and `-radii-…` where not the defaults."""
        delta = "" if self.delta == DEFAULT_DELTA else f"-delta-{self.delta:g}"
        pilots = "" if self.pilots is None else "-pilots-" + "-".join(map(str, self.pilots))
        default = self.radii is None or tuple(self.radii) == DECISION_RADII
        radii = "" if default else "-radii-" + "-".join(f"{r:g}" for r in self.radii or ())
        return f"{ENVELOPE_MARK}{delta}{pilots}{radii}"


@dataclass(frozen=True)
class CertId:
    """A certification setting as its cert_id names it. `sigma` None: each model's training
    σ; `n0` None: imported (its log does not say; nor which points: skip 1, every point);
    `max_points` None: every skip-th point of the test split; `envelope` None: strategy
    full; `ddrs`: also σ_x per point (DDRS), at least its `min_sigma`."""

    n: int
    alpha: float
    sigma: float | None
    n0: int | None = None
    skip: int = 1
    max_points: int | None = None
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    envelope: Envelope | None = None
    ddrs: DDRSSettings | None = None

    @classmethod
    def imported_from(cls, sigma: float, n: int, alpha: float) -> CertId:
        """The setting of rows `sweeper import` reads from a published log."""
        return cls(n, alpha, sigma)

    @property
    def imported(self) -> bool:
        return self.n0 is None

    @property
    def strategy(self) -> str:
        return "full" if self.envelope is None else "envelope"

    @property
    def run_tags(self) -> tuple[str, ...]:
        """The segments of the non-default run settings (none at the defaults: fp32, NCHW,
        eager, so every cert_id written before these settings existed still names its files)."""
        tags = () if self.precision == "fp32" else (f"prec-{self.precision}",)
        return tags + ("cl",) * self.channels_last + ("compiled",) * self.compile

    def run_settings(self) -> str:
        """How the base classifier ran: e.g. "fp32" or "bf16, channels_last, compiled"."""
        on = ["channels_last"] * self.channels_last + ["compiled"] * self.compile
        return ", ".join([self.precision, *on])

    def without_strategy(self) -> CertId:
        """The same setting under strategy full (what seeds a model's draws: the envelope
        strategy certifies a point with the draws `full` takes for it)."""
        return dataclasses.replace(self, envelope=None)

    @property
    def text(self) -> str:
        """The cert_id: the only place it is spelled."""
        if self.imported:
            return f"{IMPORTED_PREFIX}sigma-{self.sigma:g}-n-{self.n}-alpha-{self.alpha:g}"
        sigma = "train" if self.sigma is None else f"{self.sigma:g}"
        top = "all" if self.max_points is None else self.max_points
        text = f"sigma-{sigma}_n0-{self.n0}_n-{self.n}_alpha-{self.alpha:g}"
        text += f"_skip-{self.skip}_max-{top}" + "".join(f"_{t}" for t in self.run_tags)
        text += "" if self.envelope is None else self.envelope.tag
        return text if self.ddrs is None else f"{text}_{ddrs_tag(self.ddrs)}"

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str) -> CertId | None:
        """The setting `text` names, or None if it names none: not a spelling `CertId.text`
        writes, or values no setting takes (n < 1, α outside (0, 1), σ ≤ 0, ...). Cached: a
        sweep has few settings, its reads name them once per file."""
        return _parsed(text) if isinstance(text, str) else None

    def sane(self) -> bool:
        """Whether every value is one a setting takes."""
        positive = [1.0 if self.sigma is None else self.sigma]
        positive += [] if self.ddrs is None else [self.ddrs.min_sigma]
        counts = [self.n, self.n0 or 1, self.skip, self.max_points or 1]
        return (
            0 < self.alpha < 1
            and all(math.isfinite(v) and v > 0 for v in positive)
            and min(counts) >= 1
            and self.precision in PRECISIONS
        )


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> CertId | None:
    try:
        found = _imported(text) if is_imported(text) else _own(text)
    except (ValueError, TypeError):
        return None
    return found if found is not None and found.text == text and found.sane() else None


def ddrs_tag(ddrs: DDRSSettings) -> str:
    """DDRS's segment: OptimizeSigma's K, lr, samples and least σ."""
    return f"ddrs-K{ddrs.iterations}-lr{ddrs.lr:g}-n{ddrs.samples}-min{ddrs.min_sigma:g}"


def _imported(text: str) -> CertId | None:
    m = _IMPORTED.fullmatch(text)
    return None if m is None else CertId.imported_from(float(m[1]), int(m[2]), float(m[3]))


def _own(text: str) -> CertId | None:
    """The driver's spelling read segment by segment (`CertId.parse` checks it respells)."""
    segments = text.split("_")
    pairs = [s.partition("-") for s in segments[: len(_OWN_KEYS)]]
    if [key for key, _, _ in pairs] != list(_OWN_KEYS):
        return None
    v = dict((key, value) for key, _, value in pairs)
    found = CertId(
        n=int(v["n"]),
        alpha=float(v["alpha"]),
        sigma=None if v["sigma"] == "train" else float(v["sigma"]),
        n0=int(v["n0"]),
        skip=int(v["skip"]),
        max_points=None if v["max"] == "all" else int(v["max"]),
    )
    changes: dict = {}
    for segment in segments[len(_OWN_KEYS) :]:
        if segment.startswith("prec-"):
            changes["precision"] = segment[len("prec-") :]
        elif segment in _RUN_TAGS:
            changes[_RUN_TAGS[segment]] = True
        elif f"_{segment}".startswith(ENVELOPE_MARK):
            changes["envelope"] = _envelope(segment[len(ENVELOPE_MARK) - 1 :])
        elif m := _DDRS.fullmatch(segment):
            changes["ddrs"] = DDRSSettings(int(m[1]), float(m[2]), int(m[3]), float(m[4]))
        else:
            return None
    return dataclasses.replace(found, **changes)


def _envelope(rest: str) -> Envelope:
    """`-delta-<δ>-pilots-<a>-<b>-radii-<r>-…` (each part optional) as an `Envelope`."""
    parts = _ENVELOPE_PARTS.split(rest)
    if parts[0]:
        raise ValueError(rest)
    values = dict(zip(parts[1::2], parts[2::2], strict=True))
    return Envelope(
        delta=float(values["delta"]) if "delta" in values else DEFAULT_DELTA,
        pilots=tuple(int(p) for p in _numbers(values["pilots"])) if "pilots" in values else None,
        radii=tuple(float(r) for r in _numbers(values["radii"])) if "radii" in values else None,
    )


def _numbers(text: str) -> list[str]:
    """Numbers joined by `-`, a `-` after an `e` being an exponent's sign (`1e-05`)."""
    return re.split(r"(?<!e)-", text)
