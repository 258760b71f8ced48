"""locuslab/smoothing (Cohen et al. 2019): `<dataset>/<arch>/noise_<σ>/test/sigma_<σ>`.

noise_<σ>[_<anything>]: training σ (a log file named so, as the jh-jeong code names its logs:
certification σ = σ).

sigma_<σ>[.<ext>]: certification σ, the log file's name: certify.py's `sigma` argument. It
need not be the training σ: Cohen et al. published noise_0.12, noise_0.25 and noise_1.00
models certified at sigma_0.50 (analyze.py's "vary train noise"), and SmoothAdv noise_0.00
models at sigma_0.12 to sigma_1.00. The rows store it as sigma_cert and their radii are
bounded by it.

cohen, gaussian: method gaussian (only if no other method is named: these also name the base
training of other methods).
"""

from __future__ import annotations

from sweeper.ingest.layouts.shared import NUM, Handler, number

PATTERNS: list[tuple[str, Handler]] = [
    (rf"noise_{NUM}(?:_.*)?", number("sigma")),
    (rf"sigma_{NUM}(?:\..*)?", number("sigma_cert")),
]
METHOD_WORDS = {"cohen": "gaussian", "gaussian": "gaussian"}
