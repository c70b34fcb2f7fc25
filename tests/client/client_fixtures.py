"""Fixtures of the client tests (a pytest plugin, loaded by the test modules with ``pytest_plugins``): a deltaport
server in-process over the shared corpus plus built tables, profiles for it, a recording transport."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from client_support import CORPUS, TABLES, RecordingTransport, built_tables, server_config, write_profile

from deltaport.server import create_app, parse_config


@pytest.fixture(scope="session")
def table_paths(tmp_path_factory) -> dict[str, str]:
    paths = {name: str(TABLES / rel) for name, rel in CORPUS.items()}
    paths.update(built_tables(tmp_path_factory.mktemp("built")))
    return paths


@pytest.fixture(scope="session")
def sharing_server(table_paths):
    from servers import RunningServer

    running = RunningServer(create_app(parse_config(server_config(table_paths))))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def sharing_profile(sharing_server, tmp_path_factory) -> str:
    return write_profile(tmp_path_factory.mktemp("profile") / "alice.share", sharing_server.url + "/delta-sharing")


@pytest.fixture(scope="session")
def table_url(sharing_profile) -> Callable[[str], str]:
    return lambda name: f"{sharing_profile}#corpus.default.{name}"


@pytest.fixture
def recording() -> RecordingTransport:
    transport = RecordingTransport()
    yield transport
    transport.close()
