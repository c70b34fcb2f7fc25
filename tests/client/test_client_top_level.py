"""``import deltaport as delta_sharing``: code written for the official connector runs unchanged."""

from __future__ import annotations

import inspect
import subprocess
import sys

import delta_sharing
import pytest
from client_support import frame_rows

import deltaport
import deltaport.client

pytest_plugins = ["client_fixtures"]


def test_every_public_name_of_the_official_package_is_at_the_top_level():
    names = [n for n in delta_sharing.__all__ if not n.startswith("_")]
    missing = [n for n in names if not hasattr(deltaport, n)]
    assert not missing
    for name in names:
        ours, theirs = getattr(deltaport, name), getattr(delta_sharing, name)
        if inspect.isfunction(theirs):  # same parameter names, so keyword calls keep working
            theirs_params = list(inspect.signature(theirs).parameters)
            ours_params = list(inspect.signature(ours).parameters)
            assert ours_params[: len(theirs_params)] == theirs_params, name


def test_top_level_names_are_the_connector_and_unknown_names_fail():
    assert deltaport.load_as_pandas is deltaport.client.load_as_pandas
    assert "load_as_polars" in dir(deltaport)
    with pytest.raises(AttributeError, match="no attribute 'no_such_function'"):
        deltaport.no_such_function  # noqa: B018


def test_existing_code_reads_a_table_through_the_alias(table_url):
    url = table_url("partitioned")
    ours = deltaport.load_as_pandas(url)
    theirs = delta_sharing.load_as_pandas(url)
    assert len(ours) > 0
    assert frame_rows(ours, list(theirs.columns)) == frame_rows(theirs, list(theirs.columns))
    assert deltaport.get_table_version(url) == delta_sharing.get_table_version(url)


def test_the_server_does_not_load_the_connector():
    code = "import sys, deltaport, deltaport.server.app; print('deltaport.client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
