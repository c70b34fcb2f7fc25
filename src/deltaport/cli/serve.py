"""`deltaport serve`: the sharing server as operators run it (listeners, TLS, start-up checks)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Optional

import typer

import deltaport.native as native
from deltaport.cli.common import fail


# --host, --port and --metrics-token set or add to a config setting, declared with it too (ServerConfig in
# server/sources/config.py): tests/server/sources/test_config_settings.py holds the two equal.
def serve(
    config: str = typer.Option(
        ...,
        "--config",
        "-c",
        help="Server config YAML: the reference server's format (with 'shares'), plus optional recipients; "
        "or, without 'shares', a catalog database (catalog.db beside the config, or 'catalog: URL') "
        "administered through the admin API.",
    ),
    host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (instead of the config's 'host')."),
    port: Optional[int] = typer.Option(None, "--port", "-p", help="Port (instead of the config's 'port')."),
    allow_anonymous: bool = typer.Option(
        False,
        "--allow-anonymous",
        help="Serve a config without recipients or authorization (every share to anyone, no token) on an "
        "address other than loopback; without this flag such a server listens only on loopback.",
    ),
    keying_processes: Optional[int] = typer.Option(
        None,
        "--keying-processes",
        min=0,
        max=16,
        help="Worker processes that hash file ids and sign URLs for large /query responses beside each "
        "server process (default: 0 where the compiled loops are built, as they do it faster in the server "
        "process; else 1 when the machine has 2 or more CPUs per server process).",
    ),
    workers: Optional[int] = typer.Option(
        None,
        "--workers",
        min=1,
        max=64,
        help="Server processes serving the listeners together, each replaced if it dies, all sharing one "
        "tokenSecret (instead of the config's 'workers'; default 1: the server is one process).",
    ),
    metrics_token: Optional[str] = typer.Option(
        None,
        "--metrics-token",
        envvar="DELTAPORT_METRICS_TOKEN",
        show_envvar=True,
        help="A token that reads /metrics on the recipients' port (besides the config's 'metricsToken' and "
        "the admin tokens). Prefer the environment variable: a command line is visible to every user.",
    ),
) -> None:
    """Serve the shares of a config file, or of its catalog database, over the Delta Sharing protocol."""
    from deltaport.server.fast.memory import use_server_pool

    cfg = _load(config, metrics_token)
    host = host or cfg.host
    workers = workers if workers is not None else cfg.workers
    _log_to_stderr(pids=workers > 1)
    _check_open(cfg, host, allow_anonymous)
    if native.loops is None:
        _warn_without_loops()
    if keying_processes is None:
        keying_processes = _default_keying_processes(workers)
    listen_port = port if port is not None else cfg.port
    if workers > 1:
        raise typer.Exit(_supervise(config, cfg, host, listen_port, workers, keying_processes, metrics_token))
    use_server_pool()
    _run(_app(cfg, keying_processes, metrics_token, (host, listen_port)), host, listen_port, cfg)


def _supervise(config: str, cfg, host: str, port: int, workers: int, keying: int, metrics_token: str | None) -> int:
    """Bind the listeners and run ``workers`` server processes on them (cli/workers.py); the exit code."""
    from deltaport.cli.workers import supervise

    bound = _bind(cfg, host, port, admin=_serves_admin(cfg))
    with _self_signed(cfg, host) as certificate:  # one for the port: every worker presents it
        return supervise(config, cfg, host, port, workers, keying, metrics_token, bound, certificate)


def serve_worker(spec: dict[str, Any]) -> None:
    """One worker of ``deltaport serve --workers`` (cli/workers.py): the server on the sockets the
    supervisor bound; says it serves by writing to ``spec['ready']``."""
    import socket

    from deltaport.server.fast.memory import use_server_pool

    _log_to_stderr(pids=True)
    cfg = _load(spec["config"], spec["metrics_token"])
    use_server_pool()
    host, port = spec["host"], spec["port"]
    application = _app(cfg, spec["keying"], spec["metrics_token"], (host, port))
    bound = [socket.socket(fileno=fd) for fd in spec["fds"]]
    ready = spec["ready"]

    def served() -> None:
        os.write(ready, b"r")
        os.close(ready)

    certificate = spec["certificate"]
    _run(
        application, host, port, cfg, bound=bound, announce=spec["announce"], on_started=served, certificate=certificate
    )


def _default_keying_processes(workers: int) -> int:
    """None where the compiled loops key files: they key a chunk in less time than it takes to hand
    it to a worker (a cold 1M-file answer took 1.64-1.71 s without one, 1.72-1.78 s with one).
    Without them, one per server process while the machine has two CPUs for each."""
    if native.loops is not None:
        return 0
    return 1 if (os.cpu_count() or 1) >= 2 * workers else 0


def _warn_without_loops() -> None:
    import logging

    logging.getLogger("deltaport.server").warning(
        "the compiled per-file loops (deltaport._native) are not in use: large answers take about 1.6x "
        "the CPU; reinstall deltaport where a C compiler is present%s",
        ", or unset DELTAPORT_NATIVE=0" if native.turned_off else "",
    )


def _app(cfg, keying_processes: int, metrics_token: str | None, listener: tuple[str, int]):
    """The server's app, or a one-line error (the catalog database cannot be opened, say)."""
    from deltaport.errors import DeltaportError
    from deltaport.server import create_app

    try:
        return create_app(cfg, keying_processes=keying_processes, metrics_token=metrics_token, listener=listener)
    except DeltaportError as exc:
        fail(exc)


def _serves_admin(cfg) -> bool:
    """The app will serve the admin API: a catalog's does, a config file's with admin tokens does
    (sources/serving.py)."""
    return cfg.catalog_url is not None or bool(cfg.admin_token_hashes)


def _bind(cfg, host: str, port: int, *, admin: bool) -> list:
    """The listeners' sockets: the protocol's, and with ``admin`` the admin API's at ``adminPort``."""
    bound = [_listen(host, port, "--port (or 'port' in the config)")]
    if admin and cfg.admin_port is not None:
        bound.append(_listen(cfg.admin_host or "127.0.0.1", cfg.admin_port, "'adminPort' in the config"))
    return bound


def _load(config: str, metrics_token: str | None):
    """The config; a one-line error if it does not load or ``metrics_token`` is a recipient's."""
    from deltaport.errors import DeltaportError
    from deltaport.server import load_config
    from deltaport.server.sources.config import check_metrics_token, hash_token

    try:
        cfg = load_config(config)
        if metrics_token:
            check_metrics_token(cfg, hash_token(metrics_token), "--metrics-token (or DELTAPORT_METRICS_TOKEN)")
    except DeltaportError as exc:
        fail(exc)
    return cfg


def _warm_up() -> None:
    """Pay first-call costs at start-up, not on the first recipient's request (pyarrow imports
    pandas lazily on its first conversion; compute kernels and the JSON reader initialise once)."""
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    try:
        import pandas  # noqa: F401
    except ImportError:
        pass
    table = pj.read_json(io.BytesIO(b'{"a":"x=1"}\n'))
    pc.binary_join_element_wise(pc.replace_substring(table.column("a"), "=", "%3D"), "", "")
    pa.array([1]).to_pylist()


def _run(
    application, host: str, port: int, cfg, *, bound=None, announce=True, on_started=None, certificate=None
) -> None:
    """Serve ``application`` (and its admin app, if any) on ``bound`` sockets, or on new ones;
    ``certificate`` is the (certificate, key) files of ``ssl: {selfSigned: true}`` when given."""
    with contextlib.ExitStack() as stack:
        if certificate is None and (certificate := stack.enter_context(_self_signed(cfg, host))) is not None:
            # read by uvicorn as it starts: removed then (a stop by signal ends the process before the with)
            on_started = _and_then(on_started, stack.close)
        _run_listeners(application, host, port, cfg, _tls_settings(cfg, certificate), bound, announce, on_started)


def _and_then(first, then):
    """A call of ``first`` (if any), then of ``then``."""

    def both() -> None:
        if first is not None:
            first()
        then()

    return both


@contextlib.contextmanager
def _self_signed(cfg, host: str) -> Iterator[tuple[str, str] | None]:
    """With ``ssl: {selfSigned: true}``, a new certificate and key for ``host`` (their files, in a
    private folder removed at the end of the block); else None."""
    if cfg.ssl is None or not cfg.ssl.self_signed:
        yield None
        return
    import shutil
    import tempfile
    from pathlib import Path

    from deltaport.server.sources.tls import self_signed_certificate

    folder = Path(tempfile.mkdtemp(prefix="deltaport-tls-"))
    try:
        cert, key = self_signed_certificate(folder, host)
        yield str(cert), str(key)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _tls_settings(cfg, certificate: tuple[str, str] | None) -> dict[str, Any]:
    """uvicorn's TLS settings: the self-signed ``certificate``, or the config's files, or none."""
    if certificate is not None:
        return {"ssl_certfile": certificate[0], "ssl_keyfile": certificate[1]}
    if cfg.ssl is None:
        return {}
    ssl = {"ssl_certfile": cfg.ssl.certificate_file, "ssl_keyfile": cfg.ssl.certificate_key_file}
    if cfg.ssl.certificate_password_file:
        from pathlib import Path

        ssl["ssl_keyfile_password"] = Path(cfg.ssl.certificate_password_file).read_text().strip()
    return ssl


def _run_listeners(application, host: str, port: int, cfg, ssl: dict[str, Any], bound, announce, on_started) -> None:
    """``_run`` once the TLS settings (``ssl``, uvicorn's) are known."""
    _warm_up()
    if announce:
        _announce(application, host, port, cfg, bool(ssl))
    admin_app = getattr(application.state, "admin_app", None)
    # uvicorn's own access log would print query strings (URL signatures): ours logs paths only
    # proxy_headers off: X-Forwarded-For is trusted only from the configured proxies (server/ops/access.py)
    settings = {"access_log": False, "log_level": "info", "proxy_headers": False, **ssl, **_http_protocol(application)}
    bound = bound or _bind(cfg, host, port, admin=admin_app is not None)
    listeners = [(application, bound[0])]
    if admin_app is not None:
        listeners.append((admin_app, bound[1]))
    _serve(listeners, settings, on_started)


def _http_protocol(application) -> dict[str, Any]:
    """uvicorn's ``http`` setting: its httptools protocol with the app's file bodies sent by
    ``sendfile`` (server/fast/zerocopy.py) where that can be offered, else uvicorn's own choice."""
    from deltaport.server.fast.file_reads import READERS
    from deltaport.server.fast.zerocopy import protocol_class

    files = getattr(application, "files", None)  # the file fast path (none without the hot paths)
    protocol = None if files is None else protocol_class(READERS, files.serves)
    return {} if protocol is None else {"http": protocol}


def _announce(application, host: str, port: int, cfg, tls: bool) -> None:
    scheme = f"http{'s' if tls else ''}"
    shares = len(application.state.service.config.shares)
    typer.echo(f"serving {shares} share(s) on {scheme}://{host}:{port}{cfg.endpoint}")
    _say_metrics(application)
    if cfg.catalog_url is not None:
        _say_catalog(cfg, shares, f"{scheme}://{cfg.admin_host or host}:{cfg.admin_port or port}")


def _serve(listeners: list, settings: dict[str, Any], on_started=None) -> None:
    """Serve each (app, bound socket) on one event loop: uvicorn's own (uvloop where installed, as
    ``uvicorn.run`` picks it; the default asyncio loop costs ~20 % of the polled calls' requests/s).
    ``on_started`` is called (from a thread) once every listener serves."""
    import asyncio

    import uvicorn

    servers = [
        (uvicorn.Server(uvicorn.Config(app_, host=sock.getsockname()[0], port=sock.getsockname()[1], **settings)), sock)
        for app_, sock in listeners
    ]
    if on_started is not None:
        _when_started([server for server, _ in servers], on_started)
    if len(servers) == 1:
        server, sock = servers[0]
        server.run(sockets=[sock])
        return

    async def serve_all() -> None:
        await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in servers))

    factory = servers[0][0].config.get_loop_factory()
    loop = factory() if factory is not None else asyncio.new_event_loop()
    try:
        loop.run_until_complete(serve_all())
    finally:
        loop.close()


def _when_started(servers: list, then) -> None:
    import threading
    import time

    def wait() -> None:
        while not all(server.started for server in servers):
            if any(server.should_exit for server in servers):
                return
            time.sleep(0.05)
        then()

    threading.Thread(target=wait, daemon=True, name="started-watch").start()


def _log_to_stderr(*, pids: bool = False) -> None:
    """Log lines to stderr; with ``pids``, each names the process that wrote it (one of several workers)."""
    import logging

    pid = " [%(process)d]" if pids else ""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s{pid} %(name)s %(message)s")


def _listen(host: str, port: int, setting: str):
    """A socket bound to ``host``:``port``, or a one-line error naming ``setting`` (a port in use, an
    address this machine does not have)."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only of sockets that name it;
    # without it, a keep-alive response sent in two writes waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fail(ValueError(f"port {port} on {host} is already in use: stop what listens there, or set {setting}"))
        fail(ValueError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): set {setting} or --host"))
    sock.set_inheritable(True)
    return sock


def _check_open(cfg, host: str, allow_anonymous: bool) -> None:
    """A server with neither ``authorization`` nor recipients serves every share to anyone: refused on
    an address other machines reach unless ``--allow-anonymous`` says it is meant; warned of always."""
    import ipaddress
    import logging

    if cfg.auth_enabled:
        return
    fix = "add 'recipients' (each with its tokens and shares) or 'authorization: {bearerToken: ...}' to the config"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_anonymous:
        fail(
            ValueError(
                f"the config has no recipients and no authorization, so every share would be served to anyone "
                f"who reaches {host}: {fix}, or pass --allow-anonymous if that is meant"
            )
        )
    logging.getLogger("deltaport.server").warning(
        "the config has no recipients and no authorization: every share is served to anyone, without a token; "
        "to require tokens, %s",
        fix,
    )


def _say_metrics(application) -> None:
    """Where /metrics is served, or how to serve it."""
    from deltaport.server.ops.metrics import ENABLE_METRICS

    if not hasattr(application.state, "metrics_at"):
        return
    where = application.state.metrics_at
    typer.echo(f"metrics: /metrics on {where}" if where else f"metrics: /metrics is not served; {ENABLE_METRICS}")


def _say_catalog(cfg, shares: int, admin_url: str) -> None:
    """Where the catalog is and how to administer it; for an empty one, how to make the first share."""
    from deltaport.catalog.db import display_url

    typer.echo(f"catalog database: {display_url(cfg.catalog_url)}; admin API: {admin_url}/api/2.1/unity-catalog")
    if not cfg.admin_token_hashes:
        typer.echo("no admin token: set DELTAPORT_ADMIN_TOKEN or 'adminTokens' in the config to use the admin API")
    if shares == 0:
        typer.echo(
            "the catalog is empty. Create the first share with the Databricks SDK "
            f"(WorkspaceClient(host='{admin_url}', token=ADMIN_TOKEN)): catalogs.create, schemas.create, "
            "tables.create(..., storage_location=PATH), shares.create, shares.update(ADD the table), "
            "recipients.create (its activation_url gives the recipient a profile), shares.update_permissions; "
            f"or with 'deltaport admin --host {admin_url} ...' (see deltaport admin --help)."
        )
