"""Server config: the reference YAML unchanged, recipients, and errors that name the fix."""

from __future__ import annotations

import hashlib

import pytest

from deltaport.server.sources.config import ConfigError, hash_token, load_config, parse_config

REFERENCE = """
# the reference server's template
version: 1
shares:
- name: "share1"
  schemas:
  - name: "default"
    tables:
    - name: "table1"
      location: "s3a://bucket/table1"
      id: "00000000-0000-0000-0000-000000000000"
    - name: "table2"
      location: "wasbs://c@acct.blob.core.windows.net/table2"
      historyShared: true
      startVersion: 3
authorization:
  bearerToken: "token"
host: "localhost"
port: 8080
endpoint: "/delta-sharing"
preSignedUrlTimeoutSeconds: 900
deltaTableCacheSize: 10
stalenessAcceptable: false
evaluatePredicateHints: false
evaluateJsonPredicateHints: true
evaluateJsonPredicateHintsV2: true
queryTablePageSizeLimit: 10000
queryTablePageTokenTtlMs: 259200000
refreshTokenTtlMs: 3600000
"""


def test_reference_template_loads_unchanged(tmp_path):
    p = tmp_path / "server.yaml"
    p.write_text(REFERENCE)
    cfg = load_config(p)
    t1, t2 = cfg.shares[0].schemas[0].tables
    assert (t1.name, t1.location, t1.id, t1.history_shared) == (
        "table1",
        "s3a://bucket/table1",
        "00000000-0000-0000-0000-000000000000",
        False,
    )
    assert (t2.history_shared, t2.start_version) == (True, 3)
    assert cfg.bearer_token_hash == hash_token("token")
    assert (cfg.port, cfg.endpoint, cfg.pre_signed_url_timeout_seconds) == (8080, "/delta-sharing", 900)
    assert cfg.evaluate_predicate_hints is False
    assert cfg.auth_enabled


def test_recipients_plain_and_hashed_tokens():
    digest = hashlib.sha256(b"secret-2").hexdigest()
    cfg = parse_config(
        {
            "version": 1,
            "shares": [{"name": "sales", "schemas": []}, {"name": "marketing"}],
            "recipients": [
                {
                    "name": "alice",
                    "tokens": ["secret-1", f"sha256:{digest}"],
                    "shares": ["Sales", "marketing"],
                    "expirationTime": "2027-01-01T00:00:00Z",
                }
            ],
        }
    )
    r = cfg.recipients[0]
    assert tuple(t.digest for t in r.tokens) == (hash_token("secret-1"), bytes.fromhex(digest))
    assert r.shares == ("sales", "marketing")
    assert [t.expiration_ms for t in r.tokens] == [1798761600000, 1798761600000]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({}, "'version' must be provided"),
        ({"version": 0}, "must be greater than 0"),
        ({"version": 2}, "too new"),
        ({"version": 1, "shares": [{"schemas": []}]}, "'name' in a share must be provided"),
        ({"version": 1, "shares": [{"name": "s", "schemas": [{"tables": []}]}]}, "'name' in a schema"),
        (
            {"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t"}]}]}]},
            "'location' in table 't' must be provided",
        ),
        ({"version": 1, "authorization": {}}, "'bearerToken' in 'authorization' must be provided"),
        ({"version": 1, "shares": [{"name": "s", "schemas": [{"name": "a.b"}]}]}, "schema name 'a.b' is invalid"),
        ({"version": 1, "shares": [{"name": "bad name"}]}, "share name 'bad name' is invalid"),
        ({"version": 1, "recipients": [{"name": "x", "tokens": ["t"], "shares": ["nope"]}]}, "unknown share"),
        ({"version": 1, "recipients": [{"name": "x", "tokens": []}]}, "'tokens' of recipient 'x'"),
        ({"version": 1, "recipients": [{"name": "x", "tokens": ["sha256:zz"]}]}, "64 hex digits"),
        ({"version": 1, "port": "eighty"}, "'port' must be a whole number"),
        ({"version": 1, "ssl": {"selfSigned": False}}, "'certificateFile' and 'certificateKeyFile'"),
        (
            {
                "version": 1,
                "shares": [
                    {
                        "name": "s",
                        "schemas": [
                            {"name": "d", "tables": [{"name": "t", "location": "/x"}, {"name": "T", "location": "/y"}]}
                        ],
                    }
                ],
            },
            "defines a table name twice",
        ),
    ],
)
def test_bad_configs_name_the_problem(data, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_config(data)


def test_config_file_name_and_yaml_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"must end in \.yaml or \.yml"):
        load_config(tmp_path / "server.json")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


_TABLE = {"name": "t", "location": "/tmp/t"}


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (
            {"version": 1, "preSignedUrlTimeoutSecond": 60},
            "unknown key 'preSignedUrlTimeoutSecond' in the server config: did you mean 'preSignedUrlTimeoutSeconds'?",
        ),
        ({"version": 1, "Port": 8080}, "unknown key 'Port' in the server config: did you mean 'port'?"),
        (
            {"version": 1, "shares": [{"name": "s", "schema": []}]},
            "unknown key 'schema' in a share: did you mean 'schemas'?",
        ),
        (
            {"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "table": []}]}]},
            "unknown key 'table' in a schema in share 's': did you mean 'tables'?",
        ),
        (
            {
                "version": 1,
                "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{**_TABLE, "historyshared": True}]}]}],
            },
            "unknown key 'historyshared' in a table in schema 's.d': did you mean 'historyShared'?",
        ),
        (
            {"version": 1, "recipients": [{"name": "r", "tokens": ["x"], "share": ["s"]}]},
            "unknown key 'share' in a recipient: did you mean 'shares'?",
        ),
        (
            {"version": 1, "authorization": {"bearer_token": "x"}},
            "unknown key 'bearer_token' in 'authorization': did you mean 'bearerToken'?",
        ),
        ({"version": 1, "ssl": {"selfSigned": True, "certFile": "x"}}, "unknown key 'certFile' in 'ssl'"),
        ({"version": 1, "zzz": 1}, "unknown key 'zzz' in the server config: known keys: version, shares"),
        ({"version": 1, "shares": ["s"]}, "a share must be a mapping of keys to values, not 's'"),
    ],
)
def test_unknown_keys_are_refused_with_the_nearest_valid_one(data, needle):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert needle in str(err.value)


def _s3_config(**options) -> dict:
    table = {"name": "t", "location": "s3://bucket/tables/t", "storageOptions": options}
    return {"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]}


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (
            {"aws_allow_http": True},
            "storage option 'aws_allow_http' is not an option of s3:// stores: did you mean 'allow_http'?",
        ),
        ({"regoin": "eu-west-1"}, "storage option 'regoin' is not an option of s3:// stores: did you mean 'region'?"),
        ({"account_name": "acct"}, "storage option 'account_name' is not an option of s3:// stores"),
    ],
)
def test_storage_options_a_store_would_refuse_are_refused_at_load(options, needle):
    with pytest.raises(ConfigError) as caught:
        parse_config(_s3_config(**options))
    message = caught.value.message
    assert message.startswith("'storageOptions' (of the server or of table 's.d.t'): ")
    assert needle in message and "valid options are" in message and "endpoint" in message


def test_storage_options_stores_take_load():
    config = parse_config(_s3_config(allow_http=True, endpoint="http://127.0.0.1:9", region="us-east-1"))
    assert config.shares[0].schemas[0].tables[0].storage_options["allow_http"] is True


def test_a_store_library_panic_is_a_storage_error_not_a_crash():
    from deltaport.errors import StorageError
    from deltaport.storage import store_for

    with pytest.raises(StorageError, match="check its storage options"):
        store_for("s3://bucket/t", {"aws_allow_http": True})
