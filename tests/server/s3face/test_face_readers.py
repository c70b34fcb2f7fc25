"""Real Delta readers (delta-rs, pyarrow's S3FileSystem, polars) read tables through the S3 face
with minted credentials, and get the rows the table holds when read from its folder."""

from __future__ import annotations

import deltalake
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from face_support import (
    TABLES,
    running_face,
    s3_client,
    storage_options,
)


@pytest.fixture(scope="module")
def face(tmp_path_factory):
    yield from running_face(tmp_path_factory)


def _rows(dt: deltalake.DeltaTable) -> list[dict]:
    """The table's rows (deletion vectors and column mapping applied by delta-rs), in a fixed order."""
    table = pa.table(dt.scan().read_all())
    return sorted(table.to_pylist(), key=repr)


def test_delta_rs_reads_deletion_vectors_column_mapping_and_partitions(face):
    for name in TABLES:
        creds = face.mint(name)
        remote = deltalake.DeltaTable(creds.location, storage_options=storage_options(creds))
        local = deltalake.DeltaTable(str(face.root / name))
        assert remote.version() == local.version()
        got, want = _rows(remote), _rows(local)
        assert len(got) > 0
        assert got == want, name


def test_delta_rs_time_travel(face):
    creds = face.mint("cm")
    local = deltalake.DeltaTable(str(face.root / "cm"))
    for version in range(local.version() + 1):
        remote = deltalake.DeltaTable(creds.location, storage_options=storage_options(creds), version=version)
        old = deltalake.DeltaTable(str(face.root / "cm"), version=version)
        assert remote.version() == version
        assert _rows(remote) == _rows(old)


def test_polars_read_delta(face):
    creds = face.mint("part")
    got = pl.read_delta(creds.location, storage_options=storage_options(creds))
    want = pl.read_delta(str(face.root / "part"))
    assert got.sort(got.columns).equals(want.sort(want.columns))
    assert got.height > 0


def test_pyarrow_s3_filesystem_lists_and_reads_files(face):
    import pyarrow.dataset as ds
    from pyarrow import fs

    creds = face.mint("part")
    v = creds.values
    s3 = fs.S3FileSystem(
        access_key=v["accessKeyId"],
        secret_key=v["secretAccessKey"],
        session_token=v["sessionToken"],
        endpoint_override=v["endpoint"],
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=False,
    )
    base = "deltaport/dir/s/part"
    infos = s3.get_file_info(fs.FileSelector(base, recursive=True))
    files = sorted(i.path for i in infos if i.type == fs.FileType.File)
    local = sorted(
        "deltaport/dir/s/part/" + p.relative_to(face.root / "part").as_posix()
        for p in (face.root / "part").rglob("*")
        if p.is_file()
    )
    assert files == local
    parquet = [f for f in files if f.endswith(".parquet")]
    with s3.open_input_file(parquet[0]) as f:
        remote_bytes = f.read()
    assert remote_bytes == (face.root / "part" / parquet[0][len(base) + 1 :]).read_bytes()
    # pyarrow's own dataset reader over the face, against the same files read locally
    got = ds.dataset(parquet, filesystem=s3, format="parquet").to_table()
    want = ds.dataset([str(face.root / "part" / f[len(base) + 1 :]) for f in parquet], format="parquet").to_table()
    assert got.num_rows == want.num_rows > 0
    assert pc.sum(got.column(0)).equals(pc.sum(want.column(0)))


def test_listing_pages_in_byte_order_with_delimiter_and_start_after(face):
    creds = face.mint("cm")
    client = s3_client(creds)
    base = "dir/s/cm/"
    everything = []
    token = None
    while True:
        args = {"Bucket": "deltaport", "Prefix": base, "MaxKeys": 3}
        if token:
            args["ContinuationToken"] = token
        page = client.list_objects_v2(**args)
        everything += [o["Key"] for o in page.get("Contents", [])]
        assert page["KeyCount"] <= 3
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    local = sorted(
        (base + p.relative_to(face.root / "cm").as_posix() for p in (face.root / "cm").rglob("*") if p.is_file()),
        key=lambda k: k.encode(),
    )
    assert everything == local
    top = client.list_objects_v2(Bucket="deltaport", Prefix=base, Delimiter="/")
    assert base + "_delta_log/" in [p["Prefix"] for p in top["CommonPrefixes"]]
    assert all("/" not in o["Key"][len(base) :] for o in top.get("Contents", []))
    logs = [k for k in local if k.startswith(base + "_delta_log/")]
    after = client.list_objects_v2(Bucket="deltaport", Prefix=base + "_delta_log/", StartAfter=logs[1])
    assert [o["Key"] for o in after["Contents"]] == logs[2:]
    encoded = client.list_objects_v2(Bucket="deltaport", Prefix=base + "_delta_log/", EncodingType="url")
    assert [o["Key"] for o in encoded["Contents"]] == logs  # botocore decodes the url encoding


def test_get_with_range_and_head(face):
    creds = face.mint("dv")
    client = s3_client(creds)
    key = "dir/s/dv/_delta_log/00000000000000000000.json"
    data = (face.root / "dv" / "_delta_log" / "00000000000000000000.json").read_bytes()
    part = client.get_object(Bucket="deltaport", Key=key, Range="bytes=5-20")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["Body"].read() == data[5:21]
    head = client.head_object(Bucket="deltaport", Key=key)
    assert head["ContentLength"] == len(data)
    listed = client.list_objects_v2(Bucket="deltaport", Prefix=key)["Contents"][0]
    assert listed["ETag"] == head["ETag"] and listed["Size"] == len(data)
    assert abs((listed["LastModified"] - head["LastModified"]).total_seconds()) < 1
    client.head_bucket(Bucket="deltaport")
    assert client.get_bucket_location(Bucket="deltaport")["LocationConstraint"] is None
