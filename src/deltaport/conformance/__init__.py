"""A black-box conformance kit for Delta Sharing servers: ``deltaport conformance --profile P``.

It needs nothing of the server but a recipient profile. It finds the shared tables, picks what each
check needs (a table with files, a partitioned one, one with history, one with a change data feed,
one with enough files to page) and checks the wire answers against the protocol: listing and
paging, authentication and errors, table version and metadata, queries in both response formats,
predicate and limit hints, pages and refresh tokens, change data feeds, streaming queries, and the
file URLs themselves. A check that cannot run here is skipped with the reason.

It reads answers with plain HTTP (httpx) and its own parsing: only the profile file is read with
the connector's code.
"""

from deltaport.conformance.checks import CHECKS
from deltaport.conformance.runner import CheckResult, KitError, run, summary

__all__ = ["CHECKS", "CheckResult", "KitError", "run", "summary"]
