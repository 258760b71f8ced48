"""The `sweeper` command line: run a grid, certify, read the envelope, see the status.

Exit codes: 0 done; 1 some trial or certification task failed (a table says which, and how
to resume); 2 bad input (one line per problem, nothing started, nothing deleted); 130
interrupted (re-run the same command to resume).
"""

# Importing the command modules registers their commands.
from sweeper.cli import (  # noqa: F401
    compact,
    costs,
    data,
    empirical,
    ingest,
    keys,
    pseudo_data,
    reads,
    reports,
    runs,
    status,
)
from sweeper.cli.common import app

__all__ = ["app"]
