"""Shared helpers of the client tests: table names, server config, a recording transport, frame comparison."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "delta-tables"
TOKEN = "client-token-alice"

#: test name -> corpus directory (all history-shared)
CORPUS = {
    "dv": "table-with-dv-small",
    "dv_cdf": "cdf-table-with-dv",
    "cdf": "cdf-table",
    "cm_name": "cdf-column-mapping-name-mode",
    "cm_id": "cdf-column-mapping-id-mode",
    "cm37": "cdf-column-mapping-name-mode-3-7",
    "ntz": "data-reader-timestamp_ntz",
    "sidecars": "v2-checkpoints-parquet-with-sidecars",
    "multipart": "v1-multi-part-partitioned-struct-stats-only",
    "partitioned": "basic_partitioned",
    "checkpointed": "external-table-different-nullability",
    "short_dv": "with-short-dv",
    "ts_partition": "timestamp-partitioned-table",
    "decimal": "basic-decimal-table",
    "mixed_nulls": "mixed-nulls",
    "cm_partition": "partition_cm/name",
    "all_types": "stats-writing-all-types/delta",
    "cdc_dv": "cdf-table-with-cdc-and-dvs",
    "cdf_partitioned": "cdf-table-partitioned",
    "cdf_plain": "cdf-table-non-partitioned",
    "no_dv": "table-without-dv-small",
    "void": "void-column",
}
#: tables whose change data feed is recorded from version 0
CDF_FROM_0 = ["cdf", "dv_cdf", "cdc_dv", "cdf_partitioned", "cdf_plain"]
#: column-mapping tables whose change data feed starts at version 1
CDF_FROM_1 = ["cm_name", "cm_id", "cm37"]


def built_tables(root: Path) -> dict[str, str]:
    from builders import make_dv_table, make_partitioned_table, make_timestamp_ntz_table

    from deltaport.demo import build_demo_tables

    out = {f"demo_{k}": v for k, v in build_demo_tables(root / "demo").items()}
    out["built_dv_inline"] = make_dv_table(root, inline=True)
    out["built_dv"] = make_dv_table(root)
    out["built_partitioned"] = make_partitioned_table(root)
    try:
        out["built_ntz"] = make_timestamp_ntz_table(root)
    except BaseException:  # pytest.skip from a deltalake that cannot write timestamp_ntz
        pass
    return out


def server_config(tables: dict[str, str], **extra) -> dict:
    entries = [
        {"name": name, "location": path, "id": f"id-{name}", "historyShared": True} for name, path in tables.items()
    ]
    entries.append({"name": "nohistory", "location": str(TABLES / "basic_partitioned"), "id": "id-nohistory"})
    return {
        "version": 1,
        "shares": [
            {"name": "corpus", "schemas": [{"name": "default", "tables": entries}]},
            {
                "name": "second",
                "schemas": [
                    {"name": "s1", "tables": [{"name": "t1", "location": str(TABLES / "basic_partitioned")}]},
                    {"name": "s2", "tables": []},
                ],
            },
        ],
        "recipients": [{"name": "alice", "tokens": [TOKEN], "shares": ["corpus", "second"]}],
        "preSignedUrlTimeoutSeconds": 900,
        **extra,
    }


def write_profile(path: Path, endpoint: str, **fields) -> str:
    body = {"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN, **fields}
    path.write_text(json.dumps(body))
    return str(path)


# --- a transport that counts requests and can inject failures -------------------------------------


class RecordingTransport(httpx.BaseTransport):
    """Forwards to a real transport, recording every request; ``rules`` may answer instead.

    A rule is ``(predicate(request) -> bool, response factory, times)``: the first ``times``
    matching requests get the factory's response.
    """

    def __init__(self, inner: httpx.BaseTransport | None = None) -> None:
        self.inner = inner or httpx.HTTPTransport()
        self.requests: list[httpx.Request] = []
        self.rules: list[list] = []
        self.lock = threading.Lock()

    def add_rule(
        self,
        predicate: Callable[[httpx.Request], bool],
        factory: Callable[[httpx.Request], httpx.Response],
        times: int = 1,
    ) -> None:
        self.rules.append([predicate, factory, times])

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append(request)
            for rule in self.rules:
                predicate, factory, times = rule
                if times > 0 and predicate(request):
                    rule[2] -= 1
                    return factory(request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()

    def paths(self) -> Counter:
        return Counter(f"{r.method} {r.url.path}" for r in self.requests)

    def count(self, method: str, suffix: str) -> int:
        return sum(1 for r in self.requests if r.method == method and r.url.path.endswith(suffix))


# --- comparing frames ------------------------------------------------------------------------------


def norm(value):
    """A cell as a comparable plain value: NaN/NaT/None → None, timestamps → naive UTC ISO strings."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    try:
        import pandas as pd

        if value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover
        pass
    if hasattr(value, "to_pydatetime"):
        value = value.to_pydatetime()
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return repr(value.tolist())
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (list, tuple, dict)):
        return repr(value)
    return value


def frame_rows(df, columns) -> list[tuple]:
    return sorted(
        (tuple(norm(v) for v in row) for row in df[list(columns)].itertuples(index=False, name=None)), key=repr
    )
