"""Config load: TLS files are checked when the config loads; evaluateJsonPredicateHintsV2 is a no-op."""

from __future__ import annotations

import logging
import os

import pytest

from deltaport.server.sources.config import ConfigError, load_config, parse_config
from deltaport.server.sources.tls import self_signed_certificate


def _ssl(**ssl) -> dict:
    return {"version": 1, "ssl": ssl}


@pytest.fixture
def pair(tmp_path):
    cert, key = self_signed_certificate(tmp_path / "tls", "localhost")
    return cert, key


def test_a_readable_certificate_and_key_load(pair):
    cert, key = pair
    cfg = parse_config(_ssl(certificateFile=str(cert), certificateKeyFile=str(key)))
    assert (cfg.ssl.certificate_file, cfg.ssl.certificate_key_file) == (str(cert), str(key))


@pytest.mark.parametrize("key_name", ["certificateFile", "certificateKeyFile", "certificatePasswordFile"])
def test_a_missing_tls_file_is_a_one_line_error_naming_key_and_path(pair, tmp_path, key_name):
    cert, key = pair
    ssl = {"certificateFile": str(cert), "certificateKeyFile": str(key)}
    missing = tmp_path / "nowhere" / "file.pem"
    ssl[key_name] = str(missing)
    with pytest.raises(ConfigError) as err:
        parse_config(_ssl(**ssl))
    msg = err.value.message
    assert msg == (
        f"'{key_name}' in 'ssl' names {missing}, which cannot be read (No such file or directory): "
        "fix the path or the file's permissions"
    )
    assert "\n" not in msg


def test_a_directory_or_an_unreadable_file_is_refused(pair, tmp_path):
    cert, key = pair
    with pytest.raises(
        ConfigError,
        match=rf"'certificateKeyFile' in 'ssl' names {tmp_path}, which cannot be read "
        r"\(Is a directory\)",
    ):
        parse_config(_ssl(certificateFile=str(cert), certificateKeyFile=str(tmp_path)))
    if os.geteuid() == 0:
        return  # root reads any file: permissions cannot be tested here
    key.chmod(0)
    with pytest.raises(ConfigError, match=r"'certificateKeyFile' .* cannot be read \(Permission denied\)"):
        parse_config(_ssl(certificateFile=str(cert), certificateKeyFile=str(key)))


def test_relative_paths_are_named_in_full(pair, tmp_path, monkeypatch):
    cert, key = pair
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"'certificateFile' in 'ssl' names {tmp_path}/missing.crt,"):
        parse_config(_ssl(certificateFile="missing.crt", certificateKeyFile=str(key)))
    assert parse_config(_ssl(certificateFile=os.path.relpath(cert), certificateKeyFile=str(key))).ssl


def test_a_key_that_does_not_match_the_certificate_is_refused(pair, tmp_path):
    cert, _ = pair
    _, other_key = self_signed_certificate(tmp_path / "other", "localhost")
    with pytest.raises(ConfigError, match=r"do not load as a PEM certificate and its private key .* key matches"):
        parse_config(_ssl(certificateFile=str(cert), certificateKeyFile=str(other_key)))
    with pytest.raises(ConfigError, match="do not load as a PEM certificate"):
        parse_config(_ssl(certificateFile=str(other_key), certificateKeyFile=str(other_key)))


def test_an_encrypted_key_needs_its_password_file(pair, tmp_path):
    from cryptography.hazmat.primitives import serialization

    cert, key = pair
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("s3cret\n")
    bad.write_text("wrong\n")
    ok = parse_config(
        _ssl(certificateFile=str(cert), certificateKeyFile=str(encrypted), certificatePasswordFile=str(good))
    )
    assert ok.ssl.certificate_password_file == str(good)
    for extra in ({"certificatePasswordFile": str(bad)}, {}):  # no password file: refused, never a prompt
        with pytest.raises(ConfigError, match="'certificatePasswordFile' for an encrypted key"):
            parse_config(_ssl(certificateFile=str(cert), certificateKeyFile=str(encrypted), **extra))


def test_self_signed_reads_no_files():
    cfg = parse_config(_ssl(selfSigned=True, certificateFile="/nowhere/cert.pem"))
    assert cfg.ssl.self_signed


def test_ssl_must_be_a_mapping():
    with pytest.raises(ConfigError, match="'ssl' must be a mapping"):
        parse_config({"version": 1, "ssl": "on"})


def test_load_config_checks_the_files_too(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text(f"version: 1\nssl:\n  certificateFile: {tmp_path}/c.pem\n  certificateKeyFile: {tmp_path}/k.pem\n")
    with pytest.raises(ConfigError, match=rf"^'certificateFile' in 'ssl' names {tmp_path}/c.pem, which cannot"):
        load_config(path)


# --- evaluateJsonPredicateHintsV2 ---------------------------------------------------------------


def _v2_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "evaluateJsonPredicateHintsV2" in r.getMessage()
    ]


@pytest.mark.parametrize("value", [True, False, "false"])
def test_v2_hints_key_is_accepted_with_a_warning_that_it_has_no_effect(caplog, value):
    caplog.set_level(logging.WARNING, logger="deltaport.server")
    cfg = parse_config({"version": 1, "evaluateJsonPredicateHintsV2": value})
    assert _v2_warnings(caplog) == [
        "'evaluateJsonPredicateHintsV2' has no effect and is accepted only for compatibility: JSON predicate "
        "hints are always evaluated against partition values and file statistics; set "
        "'evaluateJsonPredicateHints: false' to turn them off"
    ]
    assert not hasattr(cfg, "evaluate_json_predicate_hints_v2")  # nothing in the server could read it
    assert cfg.evaluate_json_predicate_hints is True


def test_no_v2_key_no_warning_and_a_bad_value_is_an_error(caplog):
    caplog.set_level(logging.WARNING, logger="deltaport.server")
    parse_config({"version": 1, "evaluateJsonPredicateHints": False})
    assert _v2_warnings(caplog) == []
    with pytest.raises(ConfigError, match="'evaluateJsonPredicateHintsV2' must be true or false, not 'maybe'"):
        parse_config({"version": 1, "evaluateJsonPredicateHintsV2": "maybe"})
