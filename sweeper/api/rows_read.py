"""What every view of a `reading.Reading` reads of it (a protocol: the view modules, which
`reading` imports, import nothing of it): the experiment, the validated rows as a frame, and
the `Results` they came with. A view that reads more extends it (`report_view.Reading`,
`trial_results.Reading`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.results.certify_rows import Results
    from sweeper.results.storage import Experiment


class RowsRead(Protocol):
    @property
    def exp(self) -> Experiment: ...

    @property
    def frame(self) -> pd.DataFrame: ...

    @property
    def results(self) -> Results: ...
