"""locuslab/smoothing (Cohen et al. 2019): `<dataset>/<arch>/noise_<σ>/test/sigma_<σ>`.

    noise_<σ>[_<anything>]    training σ (a log file named so, as the jh-jeong code names its
                              logs: certification σ = σ)
    sigma_<σ>[.<ext>]         certification σ (the log file's name)
    cohen, gaussian           method gaussian (only if no other method is named: these also
                              name the base training of other methods)
"""

from __future__ import annotations

from sweeper.ingest.layouts.shared import NUM, Handler, number

PATTERNS: list[tuple[str, Handler]] = [
    (rf"noise_{NUM}(?:_.*)?", number("sigma")),
    (rf"sigma_{NUM}(?:\..*)?", number("sigma_cert")),
]
METHOD_WORDS = {"cohen": "gaussian", "gaussian": "gaussian"}
