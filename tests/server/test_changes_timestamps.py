"""Timestamps on /changes: ISO-8601 instants only, and no range that starts before the table existed."""

from __future__ import annotations

T = "/delta-sharing/shares/corpus/schemas/default/tables"


def _error(r) -> str:
    assert r.status_code == 400, r.text
    assert r.json()["errorCode"] == "INVALID_PARAMETER_VALUE"
    return r.json()["message"]


def test_a_starting_timestamp_before_the_first_commit_is_refused(http):
    message = _error(http.get(T + "/cdf/changes", params={"startingTimestamp": "2000-01-01T00:00:00Z"}))
    assert "greater than or equal to" in message


def test_a_date_without_a_time_is_refused(http):
    for name in ("startingTimestamp", "endingTimestamp"):
        params = {"startingVersion": 0} if name == "endingTimestamp" else {}
        message = _error(http.get(T + "/cdf/changes", params={**params, name: "2021-01-01"}))
        assert message.startswith(f"Invalid {name}")


def test_a_starting_timestamp_at_a_commit_reads_from_that_commit(http):
    import datetime as dt

    import orjson

    out = [orjson.loads(x) for x in http.get(T + "/cdf/changes", params={"startingVersion": 0}).content.splitlines()]
    stamps = sorted(
        {(a["version"], a["timestamp"]) for x in out for k, a in x.items() if k in ("add", "cdf", "remove")}
    )
    version, ms = stamps[-1]
    iso = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    r = http.get(T + "/cdf/changes", params={"startingTimestamp": iso})
    assert r.status_code == 200, r.text
    assert r.headers["Delta-Table-Version"] == str(version)
