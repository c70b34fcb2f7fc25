"""`deltaport serve` options: --host/--port override the config, the keying worker lives and dies with
the server, TLS file errors are one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import yaml

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "delta-tables"
DELTAPORT = str(Path(sys.executable).parent / "deltaport")


def _config(tmp_path: Path, **extra) -> Path:
    cfg = {
        "version": 1,
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}],
            }
        ],
        **extra,
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _listening(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
        return True
    except httpx.HTTPError:
        return False


def test_host_and_port_options_override_the_config(tmp_path):
    from servers import free_port

    port, config_port = free_port(), free_port()
    # the config's host is an address this machine does not have: serving there would fail to bind
    path = _config(tmp_path, host="203.0.113.7", port=config_port)
    proc = subprocess.Popen(
        [DELTAPORT, "serve", "--config", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"the server did not come up on port {port}") from None
                time.sleep(0.2)
        assert r.status_code == 200 and r.json() == {"status": "ok"}  # anyone may ask: it names nothing served
        r = httpx.get(f"http://127.0.0.1:{port}/delta-sharing/shares")
        assert r.json()["items"] == [{"name": "s"}]
        assert not _listening(config_port)
    finally:
        if proc.poll() is None:
            proc.terminate()
        out, _ = proc.communicate(timeout=15)
        print(out)  # shown by pytest when the test fails
    assert f"serving 1 share(s) on http://127.0.0.1:{port}/delta-sharing" in out


def test_a_missing_certificate_file_stops_serve_in_one_line(tmp_path):
    missing = tmp_path / "missing.crt"
    path = _config(
        tmp_path,
        host="127.0.0.1",
        port=1,
        ssl={"certificateFile": str(missing), "certificateKeyFile": str(tmp_path / "k.pem")},
    )
    out = subprocess.run([DELTAPORT, "serve", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"error: 'certificateFile' in 'ssl' names {missing}, which cannot be read "
        "(No such file or directory): fix the path or the file's permissions"
    )


def _children(pid: int) -> list[int]:
    return [child.pid for child in psutil.Process(pid).children()]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_keying_worker_starts_and_stops_with_the_server(tmp_path):
    from servers import free_port

    port = free_port()
    path = _config(tmp_path, host="127.0.0.1", port=port)
    proc = subprocess.Popen(
        [DELTAPORT, "serve", "--config", str(path), "--keying-processes", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 30
        while not (_listening(port) and _children(proc.pid)):
            assert proc.poll() is None and time.time() < deadline, "no server with a keying worker came up"
            time.sleep(0.2)
        workers = _children(proc.pid)
        r = httpx.post(f"http://127.0.0.1:{port}/delta-sharing/shares/s/schemas/d/tables/t/query", json={})
        assert r.status_code == 200 and len(r.text.splitlines()) == 2 + 6
    finally:
        proc.terminate()
        proc.wait(15)
    deadline = time.time() + 15
    while any(_alive(w) for w in workers):
        assert time.time() < deadline, "the keying worker outlived the server"
        time.sleep(0.2)


def test_a_negative_number_of_keying_processes_is_refused(tmp_path):
    out = subprocess.run(
        [DELTAPORT, "serve", "--config", str(_config(tmp_path)), "--keying-processes", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--keying-processes" in out.stderr


def test_a_port_in_use_is_named_in_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = _config(
            tmp_path, host="127.0.0.1", port=port, recipients=[{"name": "a", "tokens": ["t"], "shares": ["s"]}]
        )
        out = subprocess.run([DELTAPORT, "serve", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: port {port} on 127.0.0.1 is already in use: stop what listens there, or set --port "
        "(or 'port' in the config)"
    )
    assert "Errno" not in out.stderr


def test_an_open_server_is_refused_on_an_address_others_reach(tmp_path):
    path = _config(tmp_path, host="0.0.0.0", port=1)
    out = subprocess.run([DELTAPORT, "serve", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the config has no recipients and no authorization")
    assert "add 'recipients'" in last and "--allow-anonymous" in last


def _output_of_serve(path: Path, port: int, *args: str) -> str:
    """What `deltaport serve` printed from its start until it answered on ``port`` and was stopped."""
    proc = subprocess.Popen(
        [DELTAPORT, "serve", "--config", str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.time() + 30
        while not _listening(port):
            assert proc.poll() is None and time.time() < deadline, "the server did not come up"
            time.sleep(0.2)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=15)
    return out


def test_an_open_server_on_loopback_or_allowed_says_so_at_start(tmp_path):
    from servers import free_port

    port = free_port()
    path = _config(tmp_path, host="0.0.0.0", port=port)
    out = _output_of_serve(path, port, "--allow-anonymous", "--host", "127.0.0.1")
    assert out.count("every share is served to anyone, without a token") == 1
    assert "add 'recipients'" in out


def test_a_server_with_recipients_gives_no_open_warning(tmp_path):
    from servers import free_port

    port = free_port()
    path = _config(tmp_path, host="127.0.0.1", port=port, recipients=[{"name": "a", "tokens": ["t"], "shares": ["s"]}])
    assert "served to anyone" not in _output_of_serve(path, port)


def test_version_option_prints_the_installed_version():
    from importlib.metadata import version

    out = subprocess.run([DELTAPORT, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"deltaport {version('deltaport')}"


def test_keep_alive_answers_do_not_wait_for_delayed_acks(tmp_path):
    """The listeners `deltaport serve` binds itself must leave Nagle off on their connections: with it
    on, every keep-alive answer sent in two writes (headers, body) waited ~40 ms for the client's
    delayed ACK (about 25 answers a second per connection)."""
    import statistics

    from servers import free_port

    port = free_port()
    path = _config(tmp_path, host="127.0.0.1", port=port, recipients=[{"name": "a", "tokens": ["t"], "shares": ["s"]}])
    proc = subprocess.Popen(
        [DELTAPORT, "serve", "--config", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 30
        while not _listening(port):
            assert proc.poll() is None and time.time() < deadline, "the server did not come up"
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/delta-sharing/shares/s/schemas/d/tables/t/metadata"
        with httpx.Client(headers={"Authorization": "Bearer t"}) as client:  # one connection, kept alive
            assert client.get(url).status_code == 200
            took = []
            for _ in range(15):
                start = time.perf_counter()
                assert client.get(url).status_code == 200
                took.append(time.perf_counter() - start)
        assert statistics.median(took) < 0.02, took
    finally:
        proc.terminate()
        proc.wait(15)


def test_an_admin_listener_is_served_beside_the_protocol(tmp_path):
    """With `adminPort`, `deltaport serve` runs two listeners on one event loop: the protocol on `port`,
    the admin API on `adminPort` (and only there)."""
    from servers import free_port

    port, admin_port = free_port(), free_port()
    recipients = [{"name": "a", "tokens": ["t"], "shares": ["s"]}]
    path = _config(
        tmp_path, host="127.0.0.1", port=port, adminPort=admin_port, adminTokens=["adm"], recipients=recipients
    )
    proc = subprocess.Popen(
        [DELTAPORT, "serve", "--config", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 30
        while not (_listening(port) and _listening(admin_port)):
            assert proc.poll() is None and time.time() < deadline, "the two listeners did not come up"
            time.sleep(0.2)
        shares = httpx.get(f"http://127.0.0.1:{port}/delta-sharing/shares", headers={"Authorization": "Bearer t"})
        assert shares.json()["items"] == [{"name": "s"}]
        admin = f"http://127.0.0.1:{admin_port}/api/2.1/unity-catalog/shares"
        assert httpx.get(admin, headers={"Authorization": "Bearer adm"}).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/api/2.1/unity-catalog/shares").status_code == 404
    finally:
        proc.terminate()
        proc.wait(15)


def test_keying_workers_by_default_only_without_the_compiled_loops(monkeypatch):
    from deltaport import native
    from deltaport.cli.serve import _default_keying_processes

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(native, "loops", native)  # any module: built
    assert _default_keying_processes(1) == 0
    monkeypatch.setattr(native, "loops", None)
    assert [_default_keying_processes(w) for w in (1, 2, 3)] == [1, 1, 0]


def test_a_server_without_the_compiled_loops_says_so_and_serves(tmp_path):
    from servers import free_port

    port = free_port()
    path = _config(tmp_path, host="127.0.0.1", port=port)
    env = {**os.environ, "DELTAPORT_NATIVE": "0"}
    proc = subprocess.Popen([DELTAPORT, "serve", "--config", str(path)], stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 30
        while not _listening(port):
            assert proc.poll() is None and time.time() < deadline, "no server came up"
            time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{port}/delta-sharing/shares/s/schemas/d/tables/t/query", json={})
        assert r.status_code == 200 and len(r.text.splitlines()) == 2 + 6
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert "compiled per-file loops (deltaport._native) are not in use" in err and "DELTAPORT_NATIVE=0" in err


def test_serve_sends_file_bodies_by_sendfile_on_linux():
    """serve's uvicorn runs the protocol with the zero-copy extension (server/fast/zerocopy.py;
    its answers are tested in tests/server/fast/)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from deltaport.cli.serve import _http_protocol
    from deltaport.server import create_app, parse_config

    config = parse_config({"version": 1, "shares": []})
    protocol = _http_protocol(create_app(config)).get("http")
    assert _http_protocol(create_app(config, hot_paths=False)) == {}  # no file fast path: uvicorn's own
    if not sys.platform.startswith("linux"):
        assert protocol is None
        return
    assert protocol is not None and issubclass(protocol, HttpToolsProtocol) and protocol is not HttpToolsProtocol
    assert protocol.__module__ == "deltaport.server.fast.zerocopy"
