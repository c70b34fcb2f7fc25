import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest
from secret_scan import capture, find_leaks
from secret_scan import secrets_used as _secrets_used


def pytest_configure(config):
    """Every log record of the session, at every level, is kept for the secret scan at its end.
    Set here, before pytest's own log capture starts: it keeps the lower of its level (``log_level``,
    what reports and caplog show) and the root logger's."""
    root = logging.getLogger()
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)


def pytest_runtest_logreport(report):
    """What each test wrote to stdout/stderr (a server's own loggers that do not propagate, e.g.
    uvicorn's, write there) is scanned too."""
    for title, text in report.sections:
        if title.startswith(("Captured stdout", "Captured stderr")):
            capture.add_output(f"{title.split()[1]} of {report.nodeid}", text)


def pytest_sessionfinish(session, exitstatus):
    """The run fails when any captured line holds a secret the suite registered; the report names
    where it was seen and which secret by label, never the secret. A pytest-xdist worker hands its
    findings to the controller (``workeroutput``), which reports them with its own."""
    logging.getLogger().removeHandler(capture)
    leaks = [str(leak) for leak in find_leaks(capture.lines.items(), _secrets_used)]
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["secret_leaks"] = leaks
        return
    leaks += _worker_leaks
    if not leaks:
        return
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    lines = [f"secret scan: {len(leaks)} leak(s) of a registered secret in the logs or server output:"]
    lines += [f"  {leak}" for leak in leaks]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        print("\n".join(lines), file=sys.stderr)
        return
    reporter.ensure_newline()
    for line in lines:
        reporter.write_line(line, red=True)


_worker_leaks: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(pytest-xdist, in the controller) a worker's secret-scan findings join the controller's."""
    _worker_leaks.extend(getattr(node, "workeroutput", {}).get("secret_leaks", []))


@pytest.fixture(scope="session")
def secrets_used():
    """The suite's secret registry: ``secrets_used.add(token)`` for every token a test uses, so the
    scan at the end of the session fails the run if any log line or server output holds it."""
    return _secrets_used


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


@pytest.fixture(params=["compiled", "fallback"])
def either_loops(request, monkeypatch):
    """Runs a test with the compiled per-file loops (deltaport._native) and again without them, in
    this process and in the keying workers it spawns: both must make the same bytes."""
    from deltaport import native

    if request.param == "fallback":
        monkeypatch.setattr(native, "loops", None)
        monkeypatch.setenv("DELTAPORT_NATIVE", "0")
    elif native.loops is None:
        pytest.skip("deltaport._native is not built (reinstall with a C compiler: pip install -e .)")
    return request.param
