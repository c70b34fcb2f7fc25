import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest


@pytest.fixture(scope="session")
def moto_server():
    """A moto S3 server process on loopback, shared by the session."""
    import moto  # noqa: F401
    from servers import MotoServer

    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    """An Azurite blob server process on loopback (checks SAS signatures)."""
    import azure.storage.blob  # noqa: F401
    from servers import AzuriteServer

    server = AzuriteServer(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()


def pytest_collectreport(report):
    """A test file that cannot be imported (a missing dependency) fails the run; it is never skipped."""
    if report.skipped:
        report.outcome = "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With DELTAPORT_NO_SKIPS=1 (the test script sets it), a skipped test is a failure: every
    dependency and service the suite needs must be there."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get("DELTAPORT_NO_SKIPS") == "1":
        report.outcome = "failed"
        report.longrepr = f"skipped where nothing may be skipped: {report.longrepr}"
