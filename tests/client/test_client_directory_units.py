"""Directory access, unit by unit: the credentials answer, placement fields, mode choice, storage options."""

from __future__ import annotations

import pytest

from deltaport.client.directory import choose_mode, storage_options, table_uri
from deltaport.client.errors import AccessModeError, IncompleteResponse
from deltaport.client.model import Metadata, TemporaryCredentials, placement

AWS = {"accessKeyId": "AKIA1", "secretAccessKey": "s3cret", "sessionToken": "tok"}


def _answer(**cloud) -> dict:
    return {"credentials": {"location": "s3://b/t", "expirationTime": 1_900_000_000_000, **cloud}, "later": 1}


def test_credentials_parse_and_tolerate_unknown_fields():
    creds = TemporaryCredentials.from_answer(_answer(awsTempCredentials={**AWS, "future": "x"}), "POST x")
    assert (creds.kind, creds.location, creds.expiration_time) == ("aws", "s3://b/t", 1_900_000_000_000)
    assert creds.values["future"] == "x" and "s3cret" not in repr(creds)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({}, "no 'credentials'"),
        (_answer(), "exactly one of"),
        (_answer(awsTempCredentials=AWS, gcpOauthToken={"oauthToken": "t"}), "exactly one of"),
        (_answer(awsTempCredentials={"accessKeyId": "a", "secretAccessKey": "b"}), "sessionToken"),
        (_answer(azureUserDelegationSas={}), "sasToken"),
        ({"credentials": {"location": "s3://b/t", "awsTempCredentials": AWS}}, "expirationTime"),
        ({"credentials": {"expirationTime": 1, "awsTempCredentials": AWS}}, "location"),
    ],
)
def test_a_missing_field_is_a_protocol_error(body, problem):
    with pytest.raises(IncompleteResponse, match=problem):
        TemporaryCredentials.from_answer(body, "POST x")


def test_placement_defaults_to_url_only_and_refuses_wrong_types():
    assert placement({}, "x") == {"location": None, "auxiliary_locations": (), "access_modes": ("url",)}
    line = {"schemaString": "{}", "format": {"provider": "parquet"}}
    meta = Metadata.from_line({"deltaMetadata": line, "accessModes": ["dir"], "location": "s3://b/t"})
    assert meta.access_modes == ("dir",) and meta.location == "s3://b/t"
    for bad in ({"accessModes": "url"}, {"location": 3}, {"auxiliaryLocations": [1]}):
        with pytest.raises(IncompleteResponse):
            placement(bad, "x")


@pytest.mark.parametrize(
    ("asked", "offered", "chosen"),
    [
        (None, ("url",), "url"),
        (None, ("dir",), "dir"),
        (None, ("url", "dir"), "url"),
        ("dir", ("url", "dir"), "dir"),
        ("dir", ("dir",), "dir"),
        ("url", ("url",), "url"),
    ],
)
def test_modes_follow_the_compatibility_table(asked, offered, chosen):
    assert choose_mode(asked, offered, "s.d.t") == chosen


@pytest.mark.parametrize(("asked", "offered"), [("dir", ("url",)), ("url", ("dir",)), (None, ("other",))])
def test_a_mode_not_offered_fails_naming_what_is(asked, offered):
    with pytest.raises(AccessModeError, match=rf"offers accessModes \[{offered[0]}\]"):
        choose_mode(asked, offered, "s.d.t")


def test_storage_options_for_each_cloud():
    aws = storage_options(TemporaryCredentials("s3://b/t", "aws", {**AWS, "endpoint": "http://127.0.0.1:9"}, 1))
    assert aws["AWS_SESSION_TOKEN"] == "tok" and aws["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    assert aws["AWS_ALLOW_HTTP"] == "true" and aws["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false"
    assert "AWS_ENDPOINT_URL" not in storage_options(TemporaryCredentials("s3://b/t", "aws", AWS, 1))
    sas = storage_options(TemporaryCredentials("abfss://c@a.dfs.core.windows.net/t", "azure", {"sasToken": "sv=1"}, 1))
    assert sas == {"AZURE_STORAGE_SAS_TOKEN": "sv=1"}
    with pytest.raises(AccessModeError, match="no OAuth token for Google Cloud Storage"):
        storage_options(TemporaryCredentials("gs://b/t", "gcp", {"oauthToken": "t"}, 1))
    assert table_uri("s3a://b/t") == "s3://b/t" and table_uri("s3://b/t") == "s3://b/t"
