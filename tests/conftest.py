import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest


@pytest.fixture(scope="session")
def moto_server():
    """A moto S3 server process on loopback, shared by the session."""
    pytest.importorskip("moto")
    from servers import MotoServer

    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    """An Azurite blob server process on loopback (checks SAS signatures)."""
    pytest.importorskip("azure.storage.blob")
    from servers import AzuriteServer

    server = AzuriteServer(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()
