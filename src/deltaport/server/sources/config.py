"""Server configuration: the reference server's YAML, unchanged, plus ``recipients``.

An unknown key is refused with the nearest valid key named. Every error names the key and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import ipaddress
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deltaport.catalog.names import check_name
from deltaport.catalog.served import (
    RecipientConfig,
    SchemaConfig,
    ShareConfig,
    SharedTableConfig,
    TokenHash,
)
from deltaport.errors import DeltaportError, StorageError
from deltaport.isotime import iso_to_epoch_ms
from deltaport.storage import check_storage_options

__all__ = [
    "ConfigError",
    "RecipientConfig",
    "SchemaConfig",
    "ServerConfig",
    "ShareConfig",
    "SharedTableConfig",
    "SslConfig",
    "hash_token",
    "load_config",
    "parse_config",
]

log = logging.getLogger("deltaport.server")


class ConfigError(DeltaportError):
    """The configuration file is invalid; the message names the key and the fix."""


@dataclass(frozen=True)
class SslConfig:
    self_signed: bool = False
    certificate_file: str | None = None
    certificate_key_file: str | None = None
    certificate_password_file: str | None = None


@dataclass(frozen=True)
class ServerConfig:
    shares: tuple[ShareConfig, ...] = ()
    bearer_token_hash: bytes | None = None
    recipients: tuple[RecipientConfig, ...] = ()
    host: str = "localhost"
    port: int = 80
    endpoint: str = "/delta-sharing"
    pre_signed_url_timeout_seconds: int = 3600
    evaluate_predicate_hints: bool = True
    evaluate_json_predicate_hints: bool = True
    query_table_page_size_limit: int = 10000
    query_table_page_token_ttl_ms: int = 259_200_000
    refresh_token_ttl_ms: int = 3_600_000
    ssl: SslConfig | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    token_secret: bytes | None = None  # HMAC key for page/refresh tokens; random per process if None
    public_url: str | None = None  # base URL recipients reach this server at (for local file URLs)
    catalog_url: str | None = None  # the catalog database; None: the shares and recipients above
    admin_token_hashes: tuple[bytes, ...] = ()  # sha256 digests of the admin API's tokens
    metrics_token_hash: bytes | None = None  # sha256 digest of the token that reads /metrics
    admin_host: str | None = None  # serve the admin API on its own address (None: beside the protocol)
    admin_port: int | None = None
    activation_link_ttl_seconds: int = 7 * 24 * 3600
    catalog_poll_seconds: float = 1.0
    trusted_proxies: tuple[str, ...] = ()  # addresses/CIDRs whose X-Forwarded-For is believed
    audit_log: str | None = None  # file the audit events are appended to (JSON lines, rotated)
    source: str | None = None  # the config file this was loaded from (re-read when it changes)

    @property
    def auth_enabled(self) -> bool:
        return self.bearer_token_hash is not None or bool(self.recipients) or self.catalog_url is not None


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


#: Keys each level of the config understands. The reference server's keys that mean nothing
#: here (its cache and timeout knobs) are accepted so its config files load unchanged.
_REFERENCE_ONLY = (
    "temporaryCredentialValiditySeconds",
    "deltaTableCacheSize",
    "stalenessAcceptable",
    "requestTimeoutSeconds",
    "evaluateJsonPredicateHintsV2",
)
_KEYS = {
    "the server config": (
        "version",
        "shares",
        "authorization",
        "recipients",
        "ssl",
        "host",
        "port",
        "endpoint",
        "preSignedUrlTimeoutSeconds",
        "evaluatePredicateHints",
        "evaluateJsonPredicateHints",
        "queryTablePageSizeLimit",
        "queryTablePageTokenTtlMs",
        "refreshTokenTtlMs",
        "storageOptions",
        "tokenSecret",
        "publicUrl",
        "catalog",
        "adminTokens",
        "metricsToken",
        "adminHost",
        "adminPort",
        "activationLinkTtlSeconds",
        "catalogPollSeconds",
        "trustedProxies",
        "auditLog",
        *_REFERENCE_ONLY,
    ),
    "a share": ("name", "id", "schemas"),
    "a schema": ("name", "tables"),
    "a table": ("name", "location", "id", "historyShared", "startVersion", "storageOptions"),
    "a recipient": ("name", "tokens", "shares", "expirationTime", "allowedIpAddresses"),
    "'ssl'": ("selfSigned", "certificateFile", "certificateKeyFile", "certificatePasswordFile"),
    "'authorization'": ("bearerToken",),
}


def _check_keys(d: Any, level: str, where: str | None = None) -> Mapping[str, Any]:
    """``d`` as a mapping with only the keys ``level`` understands: a misspelt key is refused with
    the nearest valid one, never silently ignored."""
    where = where or level
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where} must be a mapping of keys to values, not {d!r}")
    known = _KEYS[level]
    for key in d:
        if key not in known:
            close = [k for k in known if k.lower() == str(key).lower()] or difflib.get_close_matches(
                str(key), known, n=1
            )
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"unknown key '{key}' in {where}: {hint}")
    return d


def _need(d: Mapping[str, Any], key: str, where: str) -> Any:
    value = d.get(key)
    if value is None or value == "":
        raise ConfigError(f"'{key}' in {where} must be provided")
    return value


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"'{key}' must be true or false, not {value!r}")


def _int(value: Any, key: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"'{key}' must be a whole number, not {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"'{key}' must be a whole number, not {value!r}") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"'{key}' must be at least {minimum}, not {number}")
    return number


def _check_name(name: Any, what: str, *, allow_dot: bool) -> str:
    """The catalog's naming rule (:func:`deltaport.catalog.names.check_name`), raising ConfigError."""
    return check_name(name, what, allow_dot=allow_dot, error=ConfigError)


def _check_readable_file(path: Any, key: str) -> None:
    """A TLS file named in 'ssl' must be there and readable now, not when the server starts serving."""
    if path in (None, ""):
        return
    full = os.path.abspath(str(path))
    try:
        with open(full, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ConfigError(
            f"'{key}' in 'ssl' names {full}, which cannot be read ({exc.strerror}): fix the path "
            "or the file's permissions"
        ) from None


def _check_key_pair(cfg: SslConfig) -> None:
    """The certificate and key must load together (PEM, matching, the password right)."""
    import ssl

    def no_password() -> bytes:  # an encrypted key without a password file fails here, never prompts
        return b""

    password: Any = no_password
    assert cfg.certificate_file and cfg.certificate_key_file  # required unless self-signed (checked before)
    if cfg.certificate_password_file:
        with open(cfg.certificate_password_file, encoding="utf-8", errors="replace") as f:
            password = f.read().strip()
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            cfg.certificate_file, cfg.certificate_key_file, password=password
        )
    except ssl.SSLError as exc:
        raise ConfigError(
            f"'certificateFile' {os.path.abspath(cfg.certificate_file)} and 'certificateKeyFile' "
            f"{os.path.abspath(cfg.certificate_key_file)} in 'ssl' do not load as a PEM certificate "
            f"and its private key ({exc.reason or exc}): check the files, that the key matches the "
            "certificate, and 'certificatePasswordFile' for an encrypted key"
        ) from None


def _table(d: Mapping[str, Any], where: str) -> SharedTableConfig:
    _check_keys(d, "a table", f"a table in {where}")
    name = _check_name(_need(d, "name", f"a table in {where}"), "table", allow_dot=False)
    location = _need(d, "location", f"table '{name}'")
    return SharedTableConfig(
        name=name,
        location=str(location),
        id=str(d.get("id") or ""),
        history_shared=_bool(d.get("historyShared", False), "historyShared"),
        start_version=_int(d.get("startVersion", 0), "startVersion", minimum=0),
        storage_options=dict(d.get("storageOptions") or {}),
    )


def _expiration(value: Any, who: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return iso_to_epoch_ms(str(value))
    except ValueError:
        raise ConfigError(f"expirationTime of recipient '{who}' must be ISO-8601, e.g. 2027-01-01T00:00:00Z") from None


def _recipient(d: Mapping[str, Any]) -> RecipientConfig:
    _check_keys(d, "a recipient")
    name = _need(d, "name", "a recipient")
    tokens = d.get("tokens")
    if not tokens or not isinstance(tokens, list):
        raise ConfigError(f"'tokens' of recipient '{name}' must be a non-empty list")
    hashes = [_token_digest(token, f"token of recipient '{name}'") for token in tokens]
    shares = d.get("shares") or []
    if not isinstance(shares, list):
        raise ConfigError(f"'shares' of recipient '{name}' must be a list of share names")
    expires = _expiration(d.get("expirationTime"), str(name))
    allowed = _ip_list(d.get("allowedIpAddresses"), f"'allowedIpAddresses' of recipient '{name}'")
    return RecipientConfig(
        str(name),
        tuple(TokenHash(h, expires) for h in hashes),
        tuple(str(s).lower() for s in shares),
        allowed_ip_addresses=allowed,
    )


def _check_version(version: Any) -> None:
    if version is None:
        raise ConfigError("'version' must be provided")
    number = _int(version, "version")
    if number <= 0:
        raise ConfigError("'version' must be greater than 0")
    if number > 1:
        raise ConfigError(
            f"The 'version' in the server config is {number} which is too new. "
            "The current release supports version 1 and below."
        )


def _share(entry: Any) -> ShareConfig:
    _check_keys(entry, "a share")
    name = _check_name(_need(entry, "name", "a share"), "share", allow_dot=True)
    schemas = []
    for schema in entry.get("schemas") or []:
        _check_keys(schema, "a schema", f"a schema in share '{name}'")
        schema_name = _check_name(_need(schema, "name", f"a schema in share '{name}'"), "schema", allow_dot=False)
        tables = tuple(_table(t, f"schema '{name}.{schema_name}'") for t in schema.get("tables") or [])
        table_names = [t.name.lower() for t in tables]
        if len(set(table_names)) != len(table_names):
            raise ConfigError(f"schema '{name}.{schema_name}' defines a table name twice")
        schemas.append(SchemaConfig(schema_name, tables))
    return ShareConfig(name, tuple(schemas), str(entry.get("id") or ""))


def _token_digest(token: Any, whose: str) -> bytes:
    """A token as its SHA-256 digest: a plain token is hashed, ``sha256:<64 hex>`` is taken as is."""
    token = str(token)
    if not token.startswith("sha256:"):
        return hash_token(token)
    digest = token[len("sha256:") :]
    if not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
        raise ConfigError(f"{whose} starting 'sha256:' must be 64 hex digits")
    return bytes.fromhex(digest)


#: An admin token given by environment (added to the config's adminTokens).
ADMIN_TOKEN_ENV = "DELTAPORT_ADMIN_TOKEN"


def _admin_tokens(d: Mapping[str, Any]) -> tuple[bytes, ...]:
    tokens = d.get("adminTokens") or []
    if not isinstance(tokens, list):
        raise ConfigError("'adminTokens' must be a list of tokens (plain, or 'sha256:<64 hex digits>')")
    digests = [_token_digest(t, "an admin token") for t in tokens]
    if os.environ.get(ADMIN_TOKEN_ENV):
        digests.append(hash_token(os.environ[ADMIN_TOKEN_ENV]))
    return tuple(digests)


def _metrics_token(value: Any) -> bytes | None:
    """The digest of the token a Prometheus scraper sends for /metrics (plain, or ``sha256:<hex>``)."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ConfigError("'metricsToken' must be one token (plain, or 'sha256:<64 hex digits>'), not a list")
    return _token_digest(value, "'metricsToken'")


def catalog_url(value: str, base: Path | None) -> str:
    """A database URL for the ``catalog`` key: a URL as is; a file path as SQLite, relative to ``base``."""
    if "://" in value:
        if not value.startswith(("sqlite:", "postgresql:", "postgresql+psycopg:", "postgres:")):
            raise ConfigError(f"'catalog' must be a file path, sqlite:///PATH or postgresql://..., not {value!r}")
        return "postgresql://" + value.split("://", 1)[1] if value.startswith("postgres:") else value
    path = Path(value).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return f"sqlite:///{path.resolve()}"


def _catalog(d: Mapping[str, Any], base: Path | None) -> str | None:
    """The catalog database of a config: its ``catalog`` key, or ``catalog.db`` beside a config
    without ``shares``; None for a config whose ``shares`` are the catalog."""
    if d.get("catalog") is not None:
        if d.get("shares") is not None:
            raise ConfigError(
                "a config has either 'shares' or 'catalog', not both: load the shares into the catalog "
                "database with 'deltaport catalog import CONFIG', then remove 'shares'"
            )
        return catalog_url(str(d["catalog"]), base)
    if "shares" in d:
        return None
    return catalog_url("catalog.db", base or Path.cwd())


def _bearer_hash(entry: Any) -> bytes:
    auth = _check_keys(entry, "'authorization'")
    token = auth.get("bearerToken") if isinstance(auth, Mapping) else None
    if not token:
        raise ConfigError("'bearerToken' in 'authorization' must be provided")
    return hash_token(str(token))


def _ssl(entry: Any) -> SslConfig:
    if not isinstance(entry, Mapping):
        raise ConfigError("'ssl' must be a mapping: selfSigned, or certificateFile and certificateKeyFile")
    _check_keys(entry, "'ssl'")
    ssl = SslConfig(
        _bool(entry.get("selfSigned", False), "selfSigned"),
        *(
            str(entry[k]) if entry.get(k) not in (None, "") else None
            for k in ("certificateFile", "certificateKeyFile", "certificatePasswordFile")
        ),
    )
    if not ssl.self_signed and not (ssl.certificate_file and ssl.certificate_key_file):
        raise ConfigError(
            "'certificateFile' and 'certificateKeyFile' in 'ssl' must be provided (or set selfSigned: true)"
        )
    if not ssl.self_signed:
        for key in ("certificateFile", "certificateKeyFile", "certificatePasswordFile"):
            _check_readable_file(entry.get(key), key)
        _check_key_pair(ssl)
    return ssl


def parse_config(d: Mapping[str, Any] | None, *, base: Path | None = None) -> ServerConfig:
    """A ServerConfig from the parsed YAML mapping; relative paths in it are taken from ``base``
    (the config file's folder)."""
    if not isinstance(d, Mapping):
        raise ConfigError("the configuration must be a YAML mapping with 'version: 1' and 'shares'")
    _check_keys(d, "the server config")
    _check_version(d.get("version"))
    shares = tuple(_share(s) for s in d.get("shares") or [])
    share_names = [share.name.lower() for share in shares]
    for share in shares:
        if share_names.count(share.name.lower()) > 1:
            raise ConfigError(f"share '{share.name}' is defined twice")
    _check_storage_options(shares, d.get("storageOptions") or {})
    recipients = tuple(_recipient(r) for r in d.get("recipients") or [])
    for recipient in recipients:
        unknown = [name for name in recipient.shares if name not in share_names]
        if unknown:
            raise ConfigError(f"recipient '{recipient.name}' is granted unknown share(s) {unknown}")
    bearer = _bearer_hash(d["authorization"]) if d.get("authorization") is not None else None
    ssl = _ssl(d["ssl"]) if d.get("ssl") else None
    if "evaluateJsonPredicateHintsV2" in d:
        _bool(d["evaluateJsonPredicateHintsV2"], "evaluateJsonPredicateHintsV2")
        log.warning(
            "'evaluateJsonPredicateHintsV2' has no effect and is accepted only for compatibility: JSON "
            "predicate hints are always evaluated against partition values and file statistics; set "
            "'evaluateJsonPredicateHints: false' to turn them off"
        )
    endpoint = "/" + str(d.get("endpoint", "/delta-sharing")).strip("/")
    secret = d.get("tokenSecret")
    return ServerConfig(
        shares=tuple(shares),
        bearer_token_hash=bearer,
        recipients=recipients,
        host=str(d.get("host", "localhost")),
        port=_int(d.get("port", 80), "port", minimum=0),
        endpoint=endpoint,
        pre_signed_url_timeout_seconds=_int(
            d.get("preSignedUrlTimeoutSeconds", 3600), "preSignedUrlTimeoutSeconds", minimum=1
        ),
        evaluate_predicate_hints=_bool(d.get("evaluatePredicateHints", True), "evaluatePredicateHints"),
        evaluate_json_predicate_hints=_bool(d.get("evaluateJsonPredicateHints", True), "evaluateJsonPredicateHints"),
        query_table_page_size_limit=_int(d.get("queryTablePageSizeLimit", 10000), "queryTablePageSizeLimit", minimum=1),
        query_table_page_token_ttl_ms=_int(
            d.get("queryTablePageTokenTtlMs", 259_200_000), "queryTablePageTokenTtlMs", minimum=0
        ),
        refresh_token_ttl_ms=_int(d.get("refreshTokenTtlMs", 3_600_000), "refreshTokenTtlMs", minimum=0),
        ssl=ssl,
        storage_options=dict(d.get("storageOptions") or {}),
        token_secret=str(secret).encode() if secret else None,
        public_url=str(d["publicUrl"]).rstrip("/") if d.get("publicUrl") else None,
        **_service_settings(d, base),
    )


def _check_storage_options(shares: tuple[ShareConfig, ...], server_options: Mapping[str, Any]) -> None:
    """Each object-store table's storage options (the server's, then its own) as its store takes them."""
    for share in shares:
        for schema in share.schemas:
            for table in schema.tables:
                try:
                    check_storage_options(table.location, {**server_options, **table.storage_options})
                except StorageError as exc:
                    where = f"'storageOptions' (of the server or of table '{share.name}.{schema.name}.{table.name}')"
                    raise ConfigError(f"{where}: {exc.message}") from None


def _service_settings(d: Mapping[str, Any], base: Path | None) -> dict[str, Any]:
    """The settings of a provider's service: the catalog database and the admin API."""
    admin_port = d.get("adminPort")
    return {
        "catalog_url": _catalog(d, base),
        "admin_token_hashes": _admin_tokens(d),
        "metrics_token_hash": _metrics_token(d.get("metricsToken")),
        "admin_host": str(d["adminHost"]) if d.get("adminHost") else None,
        "admin_port": _int(admin_port, "adminPort", minimum=0) if admin_port is not None else None,
        "activation_link_ttl_seconds": _int(
            d.get("activationLinkTtlSeconds", 7 * 24 * 3600), "activationLinkTtlSeconds", minimum=60
        ),
        "catalog_poll_seconds": _seconds(d.get("catalogPollSeconds", 1.0), "catalogPollSeconds"),
        "trusted_proxies": _ip_list(d.get("trustedProxies"), "'trustedProxies'"),
        "audit_log": _audit_log(d.get("auditLog"), base),
    }


def _ip_list(value: Any, what: str) -> tuple[str, ...]:
    """A list of IP addresses and CIDR blocks (IPv4 or IPv6), e.g. ['10.0.0.0/8', '2001:db8::1']."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of IP addresses or CIDRs, e.g. ['10.0.0.0/8']")
    for entry in value:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ConfigError(f"{what} entry {entry!r} is not an IP address or CIDR") from None
    return tuple(value)


def _audit_log(value: Any, base: Path | None) -> str | None:
    """The audit log's file: a path, relative to the config file's folder."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ConfigError(f"'auditLog' must be the path of a file to append audit events to, not {value!r}")
    path = Path(value).expanduser()
    return str(path if path.is_absolute() or base is None else base / path)


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.05 <= value <= 3600:
        raise ConfigError(f"'{key}' must be a number of seconds between 0.05 and 3600, not {value!r}")
    return float(value)


def load_config(path: str | Path) -> ServerConfig:
    p = Path(path)
    if p.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"the config file must end in .yaml or .yml: {p}")
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {p}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"the config file {p} is not valid YAML: {exc}") from exc
    return dataclasses.replace(parse_config(data, base=p.resolve().parent), source=str(p.resolve()))
