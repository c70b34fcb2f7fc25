"""A share's displayName, comment and properties and a table's accessModes and auxiliaryLocations
in the YAML config: the protocol's limits and the directory-access rule enforced at load, each
refusal naming the key, the limit and the fix."""

from __future__ import annotations

import pytest

from deltaport.catalog.served import SharedTableConfig, dir_access_refusal
from deltaport.server.sources.config import ConfigError, parse_config


def _config(share: dict | None = None, table: dict | None = None) -> dict:
    table = {"name": "t", "location": "s3://bucket/t", "historyShared": True, **(table or {})}
    share = {"name": "s", **(share or {}), "schemas": [{"name": "d", "tables": [table]}]}
    return {"version": 1, "shares": [share]}


def _share(**keys):
    return parse_config(_config(share=keys)).shares[0]


def _table(**keys) -> SharedTableConfig:
    return parse_config(_config(table=keys)).shares[0].schemas[0].tables[0]


def test_share_metadata_loads_at_its_limits():
    props = {f"k{i:03}" + "k" * 251: "v" * 1000 for i in range(50)}
    share = _share(id="1", displayName="D" * 255, comment="c" * 65_536, properties=props)
    assert (share.display_name, share.comment, share.properties) == ("D" * 255, "c" * 65_536, props)
    assert (_share().display_name, _share().comment, _share().properties) == (None, None, {})


@pytest.mark.parametrize(
    ("keys", "needles"),
    [
        ({"displayName": "D" * 256}, ("'displayName' of share 's'", "256 characters", "255", "shorten it")),
        ({"comment": "c" * 65_537}, ("'comment' of share 's'", "65537 characters", "65536", "shorten it")),
        ({"displayName": 7}, ("'displayName' of share 's' must be a string", "quote it")),
        ({"properties": ["a"]}, ("'properties' of share 's' must be a mapping",)),
        ({"properties": {f"k{i}": "v" for i in range(51)}}, ("51 pairs", "50", "remove some")),
        ({"properties": {"k" * 256: "v"}}, ("a key of 256 characters", "255", "shorten it")),
        ({"properties": {"k": "v" * 1001}}, ("'properties' 'k' of share 's' is 1001 characters", "1000")),
        ({"properties": {"created": 20240115}}, ("'properties' 'created'", "must be a string", "quote it")),
        ({"properties": {"": "v"}}, ("keys must be non-empty strings",)),
    ],
)
def test_share_metadata_beyond_the_protocols_limits_is_refused(keys, needles):
    with pytest.raises(ConfigError) as caught:
        _share(**keys)
    for needle in needles:
        assert needle in str(caught.value)


def test_access_modes_default_to_url_and_keep_one_order():
    assert _table().access_modes == ("url",)
    assert _table(accessModes=None).access_modes == ("url",)
    assert _table(accessModes=["dir", "url"]).access_modes == ("url", "dir")
    assert _table(accessModes=["dir"]).access_modes == ("dir",)


@pytest.mark.parametrize(
    ("modes", "needle"),
    [
        ([], "must be a list of 'url' and/or 'dir'"),
        ("url", "must be a list of 'url' and/or 'dir'"),
        (["url", "url"], "names an access mode twice"),
        (["URL"], "unknown access mode(s) ['URL']"),
        (["url", "files"], "unknown access mode(s) ['files']"),
    ],
)
def test_bad_access_modes_are_refused(modes, needle):
    with pytest.raises(ConfigError) as caught:
        _table(accessModes=modes)
    assert "'accessModes' of table 't' in schema 's.d'" in str(caught.value)
    assert needle in str(caught.value)


@pytest.mark.parametrize(
    "location",
    [
        "/data/t",
        "file:///data/t",
        "s3://b/t",
        "s3a://b/t",
        "s3n://b/t",
        "az://c/t",
        "abfs://c@a.dfs.core.windows.net/t",
        "abfss://c@a.dfs.core.windows.net/t",
        "wasb://c@a.blob.core.windows.net/t",
        "wasbs://c@a.blob.core.windows.net/t",
        "adl://a/t",
        "azure://c/t",
        "gs://b/t",
        "gcs://b/t",
    ],
)
def test_dir_is_served_where_credentials_can_be_vended(location):
    assert _table(location=location, accessModes=["url", "dir"]).access_modes == ("url", "dir")


@pytest.mark.parametrize("location", ["http://host/t", "https://host/t", "memory:///t"])
def test_dir_is_refused_where_no_credentials_can_be_vended(location):
    with pytest.raises(ConfigError) as caught:
        _table(location=location, accessModes=["dir"])
    message = str(caught.value)
    assert "'accessModes' of table 't'" in message and "has 'dir'" in message
    assert "cannot vend credentials" in message and "remove 'dir'" in message
    assert _table(location=location).access_modes == ("url",)  # URL access stays possible


def test_dir_is_refused_with_an_auxiliary_location_no_credentials_can_be_vended_for():
    assert _table(accessModes=["dir"], auxiliaryLocations=["gs://other/root"]).auxiliary_locations == (
        "gs://other/root",
    )
    with pytest.raises(ConfigError, match="'https://host/aux' is on 'https' storage"):
        _table(accessModes=["dir"], auxiliaryLocations=["https://host/aux"])


def test_the_one_rule_refuses_dir_on_a_partitioned_slice():
    from deltaport.catalog.model import PartitionValue

    whole = SharedTableConfig("t", "s3://b/t", history_shared=True)
    sliced = SharedTableConfig(
        "t", "s3://b/t", history_shared=True, partitions=((PartitionValue("region", value="EU"),),)
    )
    assert dir_access_refusal(whole) is None
    refusal = dir_access_refusal(sliced)
    assert refusal is not None and "partitions" in refusal and "share the whole table" in refusal


def test_dir_is_refused_without_the_tables_history():
    with pytest.raises(ConfigError) as caught:
        _table(accessModes=["url", "dir"], historyShared=False)
    assert "history" in str(caught.value) and "historyShared: true" in str(caught.value)


def test_dir_on_local_disk_takes_auxiliary_locations_on_a_cloud(tmp_path):
    table = _table(location=str(tmp_path), accessModes=["dir"], auxiliaryLocations=["s3://b/aux"])
    assert (table.access_modes, table.auxiliary_locations) == (("dir",), ("s3://b/aux",))


def test_auxiliary_locations_load_as_given():
    table = _table(auxiliaryLocations=["s3://bucket/t1", "s3://other/t", "s3://bucket/tx/"])
    assert table.auxiliary_locations == ("s3://bucket/t1", "s3://other/t", "s3://bucket/tx/")
    assert _table(auxiliaryLocations=None).auxiliary_locations == ()


@pytest.mark.parametrize(
    ("locations", "needle"),
    [
        (["s3://bucket/t"], "is inside the table's own location"),
        (["s3a://BUCKET/t/part=1/"], "is inside the table's own location"),
        (["s3://b/aux", "s3://b/aux/"], "names 's3://b/aux/' twice"),
        (["/local/aux"], "is not a storage URL"),
        (["s3://b/../etc"], "'..'"),
        ("s3://b/aux", "must be a list of storage URLs"),
        ([3], "must be a list of storage URLs"),
    ],
)
def test_bad_auxiliary_locations_are_refused(locations, needle):
    with pytest.raises(ConfigError) as caught:
        _table(auxiliaryLocations=locations)
    assert "'auxiliaryLocations' of table 't' in schema 's.d'" in str(caught.value)
    assert needle in str(caught.value)
