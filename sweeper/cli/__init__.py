"""The `sweeper` command line: run a grid, certify, read the envelope, see the status.

Exit codes: 0 done; 1 some trial or certification task failed (a table says which, and how
to resume); 2 bad input (one line per problem, nothing started, nothing deleted); 130
interrupted (re-run the same command to resume).
"""

from sweeper.cli import compact, costs, empirical, ingest, reads, reports, runs, status  # noqa: F401  (importing registers the commands)
from sweeper.cli.common import app

__all__ = ["app"]
