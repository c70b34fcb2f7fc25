"""The official client reading tables that live in object storage (S3 on a moto server)."""

from __future__ import annotations

import json
from pathlib import Path

import delta_sharing
import pytest
from conftest import TABLES
from servers import RunningServer

from deltaport.server import create_app, parse_config

S3_TABLES = {
    "dv": "table-with-dv-small",
    "cdf": "cdf-table",
    "partitioned": "basic_partitioned",
    "cm": "cdf-column-mapping-name-mode",
}


def _serve_with_profile(share: str, tables: list[dict], auth: dict, token: str, storage_options: dict, tmp: Path):
    """A server sharing ``tables`` as ``share.d``, and a profile file for it."""
    cfg = parse_config(
        {
            "version": 1,
            "shares": [{"name": share, "schemas": [{"name": "d", "tables": tables}]}],
            "storageOptions": storage_options,
            **auth,
        }
    )
    server = RunningServer(create_app(cfg))
    path = tmp / "p.share"
    path.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": server.url + "/delta-sharing", "bearerToken": token})
    )
    return server, str(path)


@pytest.fixture(scope="module")
def s3_profile(moto_server, tmp_path_factory):
    tables = []
    for name, src in S3_TABLES.items():
        uri = moto_server.upload_dir("shared-tables", src, TABLES / src)
        tables.append({"name": name, "location": uri.replace("s3://", "s3a://"), "historyShared": True})
    server, profile = _serve_with_profile(
        "s3",
        tables,
        {"authorization": {"bearerToken": "s3-token"}},
        "s3-token",
        moto_server.storage_options(),
        tmp_path_factory.mktemp("s3"),
    )
    yield profile, moto_server
    server.stop()


def _oracle(name: str):
    import deltalake
    import pyarrow as pa

    return pa.table(deltalake.DeltaTable(str(TABLES / S3_TABLES[name])).scan()).to_pandas()


def _sorted(df, cols):
    return sorted(map(tuple, df[cols].astype(str).itertuples(index=False, name=None)))


@pytest.mark.parametrize(
    ("name", "fmt"), [("partitioned", None), ("partitioned", False), ("dv", None), ("cm", True), ("cdf", False)]
)
def test_load_from_s3(s3_profile, name, fmt):
    profile, _moto = s3_profile
    df = delta_sharing.load_as_pandas(f"{profile}#s3.d.{name}", use_delta_format=fmt)
    expected = _oracle(name)
    cols = list(expected.columns)
    assert _sorted(df, cols) == _sorted(expected, cols)


def test_urls_point_at_the_store_presigned(s3_profile):
    profile, moto = s3_profile
    import httpx

    endpoint = json.loads(Path(profile).read_text())["endpoint"]
    r = httpx.post(
        endpoint + "/shares/s3/schemas/d/tables/partitioned/query",
        json={},
        headers={"Authorization": "Bearer s3-token"},
    )
    url = [json.loads(x) for x in r.content.splitlines()][2]["file"]["url"]
    assert url.startswith(moto.endpoint + "/shared-tables/basic_partitioned/") and "X-Amz-Signature=" in url
    assert httpx.get(url).status_code == 200


@pytest.mark.parametrize("fmt", [False, True])
def test_changes_from_s3(s3_profile, fmt):
    profile, _ = s3_profile
    df = delta_sharing.load_table_changes_as_pandas(
        f"{profile}#s3.d.cdf", starting_version=0, ending_version=3, use_delta_format=fmt
    )
    assert len(df) > 0 and {"_change_type", "_commit_version"} <= set(df.columns)


AZ_TABLES = {"dv": "table-with-dv-small", "partitioned": "basic_partitioned", "cdf": "cdf-table"}


@pytest.fixture(scope="module")
def az_profile(azurite, tmp_path_factory):
    tables = []
    for name, src in AZ_TABLES.items():
        uri = azurite.upload_dir("shared", src, TABLES / src)
        tables.append({"name": name, "location": uri, "historyShared": True})
    recipients = {"recipients": [{"name": "r", "tokens": ["az-token"], "shares": ["az"]}]}
    server, profile = _serve_with_profile(
        "az", tables, recipients, "az-token", azurite.storage_options(), tmp_path_factory.mktemp("az")
    )
    yield profile, azurite
    server.stop()


@pytest.mark.parametrize(("name", "fmt"), [("partitioned", None), ("partitioned", True), ("dv", None), ("cdf", False)])
def test_load_from_azurite(az_profile, name, fmt):
    profile, _ = az_profile
    df = delta_sharing.load_as_pandas(f"{profile}#az.d.{name}", use_delta_format=fmt)
    import deltalake
    import pyarrow as pa

    expected = pa.table(deltalake.DeltaTable(str(TABLES / AZ_TABLES[name])).scan()).to_pandas()
    cols = list(expected.columns)
    assert _sorted(df, cols) == _sorted(expected, cols)


def test_azure_sas_urls_are_checked(az_profile):
    profile, azurite = az_profile
    import httpx

    endpoint = json.loads(Path(profile).read_text())["endpoint"]
    r = httpx.post(
        endpoint + "/shares/az/schemas/d/tables/partitioned/query",
        json={},
        headers={"Authorization": "Bearer az-token"},
    )
    url = [json.loads(x) for x in r.content.splitlines()][2]["file"]["url"]
    assert url.startswith(azurite.endpoint) and "sig=" in url and "sp=r" in url
    assert httpx.get(url).status_code == 200
    assert httpx.get(url.replace("sp=r", "sp=rw")).status_code == 403  # Azurite rejects an altered SAS


@pytest.mark.parametrize("fmt", [False, True])
def test_changes_from_azurite(az_profile, fmt):
    profile, _ = az_profile
    df = delta_sharing.load_table_changes_as_pandas(
        f"{profile}#az.d.cdf", starting_version=0, ending_version=3, use_delta_format=fmt
    )
    assert len(df) > 0
