"""The server's settings are declared once (ServerConfig's fields): the loader, the restart notice,
README.md and `deltaport serve --help` all follow the declarations; a metrics token that is also a
recipient's token or the bearer token is refused at load."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from deltaport.cli import app as cli
from deltaport.server.sources.config import SETTINGS, ConfigError, ServerConfig, hash_token, parse_config
from deltaport.server.sources.config_file import restart_needed

README = (Path(__file__).resolve().parents[3] / "README.md").read_text()
BY_KEY = {s.key: s for s in SETTINGS}


def test_each_setting_is_declared_once_with_its_attribute():
    assert len(BY_KEY) == len(SETTINGS)
    assert {s.attr for s in SETTINGS} == {f for f in ServerConfig.__dataclass_fields__} - {"source"}
    assert (BY_KEY["metricsToken"].attr, BY_KEY["catalog"].attr) == ("metrics_token_hash", "catalog_url")
    assert {s.key for s in SETTINGS if s.reload} == {"shares", "recipients", "authorization"}


def test_an_absent_key_takes_its_declared_default():
    config = parse_config({"version": 1, "shares": []})
    for s in SETTINGS:
        if s.read is not None and s.env is None:
            assert getattr(config, s.attr) == s.default, s.key


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("port", -1, "'port' must be at least 0, not -1"),
        ("preSignedUrlTimeoutSeconds", 0, "'preSignedUrlTimeoutSeconds' must be at least 1, not 0"),
        ("queryTablePageSizeLimit", "ten", "'queryTablePageSizeLimit' must be a whole number, not 'ten'"),
        ("activationLinkTtlSeconds", 59, "'activationLinkTtlSeconds' must be at least 60, not 59"),
        ("evaluatePredicateHints", "yes", "'evaluatePredicateHints' must be true or false, not 'yes'"),
        ("catalogPollSeconds", 0.01, "'catalogPollSeconds' must be a number of seconds between 0.05 and 3600"),
        ("metricsToken", ["a", "b"], "'metricsToken' must be one token"),
        ("adminTokens", "one", "'adminTokens' must be a list of tokens"),
        ("trustedProxies", ["10.0.0.300"], "'trustedProxies' entry '10.0.0.300' is not an IP address or CIDR"),
        ("storageOptions", ["region"], "'storageOptions' must be a mapping of option names to values"),
        ("workers", 0, "'workers' must be at least 1, not 0"),
        ("workers", 65, "'workers' must be at most 64, not 65"),
    ],
)
def test_a_value_its_declaration_refuses_names_the_key(key, value, needle):
    with pytest.raises(ConfigError) as caught:
        parse_config({"version": 1, "shares": [], key: value})
    assert needle in caught.value.message


def test_declared_readers_set_the_attributes():
    config = parse_config(
        {
            "version": 1,
            "shares": [],
            "port": "8080",
            "endpoint": "sharing/",
            "publicUrl": "https://sharing.example.com/",
            "tokenSecret": "s3cret",
            "catalogPollSeconds": 2,
            "auditLog": "audit.jsonl",
            "metricsToken": "scraper",
        },
        base=Path("/srv/deltaport"),
    )
    assert (config.port, config.endpoint, config.public_url) == (8080, "/sharing", "https://sharing.example.com")
    assert (config.token_secret, config.catalog_poll_seconds) == (b"s3cret", 2.0)
    assert (config.audit_log, config.metrics_token_hash) == ("/srv/deltaport/audit.jsonl", hash_token("scraper"))


def _edited(key: str, before, after, **rest) -> list[str]:
    old = parse_config({"version": 1, **rest, key: before})
    new = parse_config({"version": 1, **rest, key: after})
    return restart_needed(old, new)


@pytest.mark.parametrize(
    ("key", "before", "after", "rest"),
    [
        ("metricsToken", "scraper-1", "scraper-2", {"shares": []}),
        ("adminTokens", ["admin-1"], ["admin-2"], {"shares": []}),
        ("catalog", "one.db", "two.db", {}),
        ("auditLog", "a.jsonl", "b.jsonl", {"shares": []}),
        ("port", 8080, 8081, {"shares": []}),
        ("preSignedUrlTimeoutSeconds", 60, 120, {"shares": []}),
        ("trustedProxies", ["10.0.0.1"], ["10.0.0.2"], {"shares": []}),
    ],
)
def test_a_setting_read_at_start_is_named_by_its_key_when_edited(key, before, after, rest):
    assert _edited(key, before, after, **rest) == [key]


def test_an_edit_of_what_reloads_needs_no_restart():
    recipient = {"name": "r", "tokens": ["t"], "shares": []}
    assert _edited("recipients", [], [recipient], shares=[]) == []
    assert _edited("authorization", {"bearerToken": "a"}, {"bearerToken": "b"}, shares=[]) == []
    assert _edited("shares", [], [{"name": "s"}]) == []


def test_every_config_key_is_documented_in_the_readme():
    missing = [s.key for s in SETTINGS if f"`{s.key}`" not in README and f"{s.key}:" not in README]
    assert missing == []
    assert [s.env for s in SETTINGS if s.env and s.env not in README] == []


def _serve_options() -> dict[str, typer.core.TyperOption]:
    command = typer.main.get_command(cli).commands["serve"]  # type: ignore[attr-defined]
    return {opt: param for param in command.params for opt in param.opts}


def test_every_declared_flag_is_a_serve_option_as_declared():
    options = _serve_options()
    flagged = [s for s in SETTINGS if s.flags]
    assert {s.key for s in flagged} == {"host", "port", "metricsToken", "workers"}
    for s in flagged:
        param = options[s.flags[0]]
        assert (tuple(param.opts), param.envvar) == (s.flags, s.env), s.key
        assert f"'{s.key}'" in param.help, f"--help of {s.flags[0]} should name the setting '{s.key}'"
    shown = CliRunner().invoke(cli, ["serve", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert shown.exit_code == 0, shown.output
    for s in flagged:
        assert all(flag in shown.output for flag in s.flags) and (s.env is None or s.env in shown.output), s.key


@pytest.mark.parametrize("form", ["plain", "sha256"])
def test_a_metrics_token_that_is_a_recipients_token_is_refused(form):
    token = "alice-token-0123456789"
    given = token if form == "plain" else "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    recipients = [{"name": "alice", "tokens": [token], "shares": []}]
    with pytest.raises(ConfigError) as caught:
        parse_config({"version": 1, "shares": [], "recipients": recipients, "metricsToken": given})
    assert caught.value.message == (
        "'metricsToken' is also a token of recipient 'alice': /metrics would be open to a recipient; give the "
        "metrics token a value of its own (e.g. from 'openssl rand -hex 32')"
    )
    assert token not in caught.value.message


def test_a_metrics_token_that_is_the_bearer_token_is_refused():
    with pytest.raises(ConfigError, match=r"'metricsToken' is also 'bearerToken' in 'authorization'"):
        parse_config({"version": 1, "shares": [], "authorization": {"bearerToken": "b"}, "metricsToken": "b"})
    parse_config({"version": 1, "shares": [], "authorization": {"bearerToken": "b"}, "metricsToken": "m"})


def test_serve_refuses_a_metrics_token_flag_that_is_a_recipients_token(tmp_path):
    config = tmp_path / "server.yaml"
    config.write_text("version: 1\nshares: []\nrecipients: [{name: bob, tokens: [bob-token-0123], shares: []}]\n")
    environment = {"DELTAPORT_METRICS_TOKEN": "bob-token-0123"}
    # an address this machine does not have: were the token not refused, serve would stop there
    args = ["serve", "--config", str(config), "--host", "203.0.113.7", "--keying-processes", "0"]
    refused = CliRunner().invoke(cli, args, env=environment)
    assert refused.exit_code == 2
    assert "--metrics-token (or DELTAPORT_METRICS_TOKEN) is also a token of recipient 'bob'" in refused.output
