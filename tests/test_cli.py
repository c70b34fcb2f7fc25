"""`deltaport inspect` on real tables and on bad input."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
from typer.testing import CliRunner

from deltaport.cli import app

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "delta-tables"
runner = CliRunner()


def test_inspect_summary():
    result = runner.invoke(app, ["inspect", str(TABLES / "basic_partitioned")])
    assert result.exit_code == 0, result.output
    assert "version     1" in result.output
    assert "partitions  letter" in result.output
    assert "files       6" in result.output


def test_inspect_json_and_version():
    result = runner.invoke(app, ["inspect", str(TABLES / "basic_partitioned"), "--version", "0", "--json"])
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.output)
    assert summary["version"] == 0
    assert summary["numFiles"] == 3
    assert summary["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}


def test_inspect_files_are_add_actions_with_dv():
    result = runner.invoke(app, ["inspect", str(TABLES / "table-with-dv-small"), "--files"])
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.output.splitlines()]
    assert len(lines) == 1
    add = lines[0]["add"]
    assert add["deletionVector"]["storageType"] == "u"
    assert add["deletionVector"]["cardinality"] == 2
    assert add["stats"].startswith('{"numRecords":10')


def test_inspect_changes_range():
    result = runner.invoke(app, ["inspect", str(TABLES / "table-with-dv-small"), "--changes", "0..1"])
    assert result.exit_code == 0, result.output
    kinds = [next(iter(orjson.loads(line))) for line in result.output.splitlines()]
    assert kinds == ["commit", "protocol", "metaData", "add", "commit", "add", "remove"]


def test_inspect_errors_are_one_line_and_exit_2(tmp_path):
    for args, needle in [
        (["inspect", str(tmp_path)], "not a Delta table"),
        (["inspect", str(TABLES / "table-with-geo")], "geospatial"),
        (["inspect", str(TABLES / "basic_partitioned"), "-v", "7"], "The latest available version is 1."),
        (["inspect", str(TABLES / "basic_partitioned"), "--changes", "x"], "FROM..TO"),
        (["inspect", str(TABLES / "basic_partitioned"), "-v", "0", "-t", "2020-01-01T00:00:00Z"], "not both"),
    ]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output
        assert "Traceback" not in result.output


def test_inspect_errors_show_the_operator_where_the_table_is(tmp_path):
    """Recipients never see a table's location; the operator running the CLI does."""
    result = runner.invoke(app, ["inspect", str(TABLES / "basic_partitioned"), "-v", "7"])
    assert result.exit_code == 2
    assert "(table: file://" in result.output and "basic_partitioned" in result.output
