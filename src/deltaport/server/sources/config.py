"""Server configuration: the reference server's YAML, unchanged, plus ``recipients``.

Each top-level setting is declared once, on its :class:`ServerConfig` field (settings.py says
what a declaration holds). An unknown key is refused with the nearest valid key named. Every error
names the key and the fix.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from deltaport.catalog.names import check_name
from deltaport.catalog.served import (
    DIR,
    RecipientConfig,
    SchemaConfig,
    ShareConfig,
    SharedTableConfig,
    TokenHash,
    check_access_modes,
    check_auxiliary_locations,
    check_comment,
    check_display_name,
    check_properties,
    dir_access_refusal,
)
from deltaport.errors import StorageError
from deltaport.isotime import iso_to_epoch_ms
from deltaport.server.sources.settings import (
    ConfigError,
    Seconds,
    Whole,
    boolean,
    check_keys,
    declared,
    hash_token,
    ip_list,
    read_bool,
    read_bucket,
    read_endpoint,
    read_ip_list,
    read_mapping,
    read_optional_text,
    read_path,
    read_secret,
    read_text,
    read_token,
    read_tokens,
    read_url,
    setting,
    token_digest,
    whole,
)
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


@dataclass(frozen=True)
class SslConfig:
    self_signed: bool = False
    certificate_file: str | None = None
    certificate_key_file: str | None = None
    certificate_password_file: str | None = None


#: An admin token given by environment (added to the config's adminTokens).
ADMIN_TOKEN_ENV = "DELTAPORT_ADMIN_TOKEN"  # noqa: S105  # the variable's name, not a token
#: The token secret given by environment (used when the config has no tokenSecret; `deltaport serve
#: --workers` hands its workers one this way).
TOKEN_SECRET_ENV = "DELTAPORT_TOKEN_SECRET"  # noqa: S105  # the variable's name, not a secret
#: The most server processes `deltaport serve --workers` starts.
MAX_WORKERS = 64


@dataclass(frozen=True)
class ServerConfig:
    """The server's settings, each declared once: its YAML key, default, reader (type and bounds),
    whether an edit of the config file applies without a restart, its flag and environment
    variable, and its doc. A reader of None: parsed by this module's own code below."""

    shares: tuple[ShareConfig, ...] = setting(
        "shares", (), None, "the shares, their schemas and tables (else a catalog database serves them)", reload=True
    )
    bearer_token_hash: bytes | None = setting(
        "authorization", None, None, "'bearerToken': one token that reads every share, as in the reference", reload=True
    )
    recipients: tuple[RecipientConfig, ...] = setting(
        "recipients", (), None, "who reads which shares, with their tokens (plain or sha256:<hex>)", reload=True
    )
    ssl: SslConfig | None = setting(
        "ssl", None, None, "TLS: 'selfSigned', or 'certificateFile' and 'certificateKeyFile'"
    )
    host: str = setting("host", "localhost", read_text, "the address the protocol's listener binds", flags=("--host",))
    port: int = setting(
        "port", 80, Whole(0), "the protocol's listener's port (80 as in the reference)", flags=("--port", "-p")
    )
    endpoint: str = setting("endpoint", "/delta-sharing", read_endpoint, "the path the protocol is served under")
    pre_signed_url_timeout_seconds: int = setting(
        "preSignedUrlTimeoutSeconds", 3600, Whole(1), "how long a file URL handed out works"
    )
    temporary_credential_validity_seconds: int = setting(
        "temporaryCredentialValiditySeconds",
        3600,
        Whole(1),
        "how long credentials for directory access work (a cloud may shorten them: the answer says)",
    )
    evaluate_predicate_hints: bool = setting(
        "evaluatePredicateHints", True, read_bool, "prune files with SQL predicateHints"
    )
    evaluate_json_predicate_hints: bool = setting(
        "evaluateJsonPredicateHints", True, read_bool, "prune files with jsonPredicateHints"
    )
    query_table_page_size_limit: int = setting(
        "queryTablePageSizeLimit", 10000, Whole(1), "the most files one page of a query returns"
    )
    stream_above_files: int = setting(
        "streamAboveFiles",
        500_000,
        Whole(0),
        "a table whose checkpoint holds at least this many files is queried a piece at a time, in bounded "
        "memory, rather than replayed whole and cached (0: every table with a checkpoint)",
    )
    query_table_page_token_ttl_ms: int = setting(
        "queryTablePageTokenTtlMs", 259_200_000, Whole(0), "how long a query's page token works"
    )
    refresh_token_ttl_ms: int = setting(
        "refreshTokenTtlMs", 3_600_000, Whole(0), "how long a query's refresh token works"
    )
    async_query_threshold_ms: int = setting(
        "asyncQueryThresholdMs",
        1000,
        Whole(0),
        "how long a query sent with asyncquery=true may plan before it is answered with a queryId to poll "
        "(0: always answered with one)",
    )
    async_query_ttl_seconds: int = setting(
        "asyncQueryTtlSeconds", 3600, Whole(1), "how long an asynchronous query's queryId can be polled"
    )
    storage_options: Mapping[str, Any] = setting(
        "storageOptions", {}, read_mapping, "obstore options of every object-store table (a table's own win)"
    )
    token_secret: bytes | None = setting(
        "tokenSecret",
        None,
        read_secret,
        "signs page/refresh tokens and file URLs (random per process if unset; one for all workers)",
        env=TOKEN_SECRET_ENV,
    )
    public_url: str | None = setting(
        "publicUrl", None, read_url, "how recipients reach this server: file URLs and activation links name it"
    )
    catalog_url: str | None = setting(
        "catalog", None, None, "the catalog database (a path or URL; catalog.db beside a config without shares)"
    )
    admin_token_hashes: tuple[bytes, ...] = setting(
        "adminTokens", (), read_tokens, "the admin API's tokens (plain or sha256:<hex>)", env=ADMIN_TOKEN_ENV
    )
    metrics_token_hash: bytes | None = setting(
        "metricsToken",
        None,
        read_token,
        "a token that reads /metrics (plain or sha256:<hex>)",
        flags=("--metrics-token",),
        env="DELTAPORT_METRICS_TOKEN",
    )
    admin_host: str | None = setting(
        "adminHost", None, read_optional_text, "the admin listener's address (loopback if unset)"
    )
    admin_port: int | None = setting(
        "adminPort", None, Whole(0), "serve the admin API on a listener of its own, at this port"
    )
    activation_link_ttl_seconds: int = setting(
        "activationLinkTtlSeconds", 7 * 24 * 3600, Whole(60), "how long a recipient's activation link works"
    )
    catalog_poll_seconds: float = setting(
        "catalogPollSeconds", 1.0, Seconds(0.05, 3600), "how often the catalog or config file is checked for changes"
    )
    trusted_proxies: tuple[str, ...] = setting(
        "trustedProxies", (), read_ip_list, "addresses/CIDRs of proxies whose X-Forwarded-For is believed"
    )
    audit_log: str | None = setting(
        "auditLog", None, read_path, "file the audit events are appended to (JSON lines, rotated)"
    )
    directory_bucket: str = setting(
        "directoryBucket",
        "deltaport",
        read_bucket,
        "the bucket of the read-only S3 face (path-style, on this listener) for directory access to local tables",
    )
    workers: int = setting(
        "workers",
        1,
        Whole(1, MAX_WORKERS),
        "server processes serving the listeners, replaced if one dies (1: the server is one process)",
        flags=("--workers",),
    )
    source: str | None = None  # the config file this was loaded from (re-read when it changes)

    @property
    def auth_enabled(self) -> bool:
        return self.bearer_token_hash is not None or bool(self.recipients) or self.catalog_url is not None


#: The top-level settings, in declaration order.
SETTINGS = declared(ServerConfig)
#: The settings this module reads through their declared reader.
_READ = tuple((s.key, s.attr, s.read) for s in SETTINGS if s.read is not None)

#: The reference server's keys that mean nothing here (its cache and timeout knobs): accepted so
#: its config files load unchanged.
_REFERENCE_ONLY = (
    "temporaryCredentialValiditySeconds",
    "deltaTableCacheSize",
    "stalenessAcceptable",
    "requestTimeoutSeconds",
    "evaluateJsonPredicateHintsV2",
)
#: Keys each level of the config understands.
_KEYS = {
    "the server config": ("version", *(s.key for s in SETTINGS), *_REFERENCE_ONLY),
    "a share": ("name", "id", "displayName", "comment", "properties", "schemas"),
    "a schema": ("name", "tables"),
    "a table": (
        "name",
        "location",
        "id",
        "historyShared",
        "startVersion",
        "storageOptions",
        "accessModes",
        "auxiliaryLocations",
    ),
    "a recipient": ("name", "tokens", "shares", "expirationTime", "allowedIpAddresses"),
    "'ssl'": ("selfSigned", "certificateFile", "certificateKeyFile", "certificatePasswordFile"),
    "'authorization'": ("bearerToken",),
}


def _check_keys(d: Any, level: str, where: str | None = None) -> Mapping[str, Any]:
    return check_keys(d, _KEYS[level], where or level)


def _need(d: Mapping[str, Any], key: str, where: str) -> Any:
    value = d.get(key)
    if value is None or value == "":
        raise ConfigError(f"'{key}' in {where} must be provided")
    return value


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


def _or(value: Any, default: Any) -> Any:
    """A key's value, or its default when absent or null."""
    return default if value is None else value


def _table(d: Mapping[str, Any], where: str) -> SharedTableConfig:
    _check_keys(d, "a table", f"a table in {where}")
    name = _check_name(_need(d, "name", f"a table in {where}"), "table", allow_dot=False)
    location = str(_need(d, "location", f"table '{name}'"))
    table = f"table '{name}' in {where}"
    table_config = SharedTableConfig(
        name=name,
        location=location,
        id=str(d.get("id") or ""),
        history_shared=boolean(d.get("historyShared", False), "historyShared"),
        start_version=whole(d.get("startVersion", 0), "startVersion", minimum=0),
        storage_options=dict(d.get("storageOptions") or {}),
        access_modes=check_access_modes(_or(d.get("accessModes"), ["url"]), table, "'accessModes'", ConfigError),
        auxiliary_locations=check_auxiliary_locations(
            _or(d.get("auxiliaryLocations"), []), location, table, "'auxiliaryLocations'", ConfigError
        ),
    )
    refusal = dir_access_refusal(table_config) if DIR in table_config.access_modes else None
    if refusal:
        raise ConfigError(f"'accessModes' of {table} has 'dir', but {refusal}")
    return table_config


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
    hashes = [token_digest(token, f"token of recipient '{name}'") for token in tokens]
    shares = d.get("shares") or []
    if not isinstance(shares, list):
        raise ConfigError(f"'shares' of recipient '{name}' must be a list of share names")
    expires = _expiration(d.get("expirationTime"), str(name))
    allowed = ip_list(d.get("allowedIpAddresses"), f"'allowedIpAddresses' of recipient '{name}'")
    return RecipientConfig(
        str(name),
        tuple(TokenHash(h, expires) for h in hashes),
        tuple(str(s).lower() for s in shares),
        allowed_ip_addresses=allowed,
    )


def _check_version(version: Any) -> None:
    if version is None:
        raise ConfigError("'version' must be provided")
    number = whole(version, "version")
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
    where = f"share '{name}'"
    return ShareConfig(
        name,
        tuple(schemas),
        str(entry.get("id") or ""),
        comment=check_comment(entry.get("comment"), where, "'comment'", ConfigError),
        display_name=check_display_name(entry.get("displayName"), where, "'displayName'", ConfigError),
        properties=check_properties(entry.get("properties"), where, "'properties'", ConfigError),
    )


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
        boolean(entry.get("selfSigned", False), "selfSigned"),
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
    (the config file's folder). A key that is absent or null takes its declared default."""
    if not isinstance(d, Mapping):
        raise ConfigError("the configuration must be a YAML mapping with 'version: 1' and 'shares'")
    _check_keys(d, "the server config")
    _check_version(d.get("version"))
    _check_reference_only(d)
    values = {attr: read(d[key], key, base) for key, attr, read in _READ if d.get(key) is not None}
    shares = tuple(_share(s) for s in d.get("shares") or [])
    share_names = [share.name.lower() for share in shares]
    for share in shares:
        if share_names.count(share.name.lower()) > 1:
            raise ConfigError(f"share '{share.name}' is defined twice")
    _check_storage_options(shares, values.get("storage_options", {}))
    recipients = tuple(_recipient(r) for r in d.get("recipients") or [])
    for recipient in recipients:
        unknown = [name for name in recipient.shares if name not in share_names]
        if unknown:
            raise ConfigError(f"recipient '{recipient.name}' is granted unknown share(s) {unknown}")
    bearer = _bearer_hash(d["authorization"]) if d.get("authorization") is not None else None
    if os.environ.get(ADMIN_TOKEN_ENV):
        values["admin_token_hashes"] = (*values.get("admin_token_hashes", ()), hash_token(os.environ[ADMIN_TOKEN_ENV]))
    if "token_secret" not in values and os.environ.get(TOKEN_SECRET_ENV):
        values["token_secret"] = os.environ[TOKEN_SECRET_ENV].encode()
    config = ServerConfig(
        shares=shares,
        bearer_token_hash=bearer,
        recipients=recipients,
        ssl=_ssl(d["ssl"]) if d.get("ssl") else None,
        catalog_url=_catalog(d, base),
        **values,
    )
    check_metrics_token(config, config.metrics_token_hash, "'metricsToken'")
    _check_bucket(config)
    return config


#: First path segments the recipients' listener serves itself (a bucket of that name would hide them).
_OWN_PATHS = ("health", "metrics", "docs", "redoc", "openapi.json", "api")


def _check_bucket(config: ServerConfig) -> None:
    taken = {*_OWN_PATHS, config.endpoint.strip("/").split("/", 1)[0].lower()}
    if config.directory_bucket in taken:
        raise ConfigError(
            f"'directoryBucket' {config.directory_bucket!r} is also a path this server serves "
            f"({', '.join(sorted(t for t in taken if t))}): give the bucket another name"
        )


def _check_reference_only(d: Mapping[str, Any]) -> None:
    if "evaluateJsonPredicateHintsV2" in d:
        boolean(d["evaluateJsonPredicateHintsV2"], "evaluateJsonPredicateHintsV2")
        log.warning(
            "'evaluateJsonPredicateHintsV2' has no effect and is accepted only for compatibility: JSON "
            "predicate hints are always evaluated against partition values and file statistics; set "
            "'evaluateJsonPredicateHints: false' to turn them off"
        )


def check_metrics_token(config: ServerConfig, digest: bytes | None, what: str) -> None:
    """A metrics token must be no recipient's token and not the bearer token: a token handed to a
    recipient would read every recipient's and share's series. Compared by digest, in constant time."""
    if digest is None:
        return
    holders = [("'bearerToken' in 'authorization'", config.bearer_token_hash)] + [
        (f"a token of recipient '{r.name}'", t.digest) for r in config.recipients for t in r.tokens
    ]
    for holder, other in holders:
        if other is not None and hmac.compare_digest(digest, other):
            raise ConfigError(
                f"{what} is also {holder}: /metrics would be open to a recipient; give the metrics "
                "token a value of its own (e.g. from 'openssl rand -hex 32')"
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
