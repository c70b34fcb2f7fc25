"""The server's promises about secrets and file access, one test per rule (REFERENCE-BEHAVIOUR.md and
the README): tokens are never logged and are kept and compared as hashes in constant time; the
access log has no query strings; the server's file URLs are bound to their path, expiry and table;
no request reads outside a table's root; page, refresh and listing tokens cannot be replayed on
another table, by another recipient, or once expired.
"""

from __future__ import annotations

import calendar
import dataclasses
import hashlib
import logging
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import httpx
import orjson
import pytest
import yaml
from conftest import TABLES
from secret_scan import LogCapture, SecretRegistry, add_process_output, capture, find_leaks, secrets_used
from servers import RunningServer, free_port

from deltaport.server import create_app, parse_config
from deltaport.signing.sigv4 import SigV4Presigner, uri_encode_path

ALICE = "security-token-alice-5e1c"
CAROL = "security-token-carol-77d2"
BOB = "security-token-bob-a90f"
FILE_SECRET = b"security-file-url-secret-c4d8e2"
OUTSIDE = b"OUTSIDE-THE-TABLE: never serve these bytes"
secrets_used.add(ALICE, CAROL, BOB, label="a security test's bearer token")
secrets_used.add(FILE_SECRET.decode(), label="the security server's file-URL secret")

P = "/delta-sharing"
S = P + "/shares/s/schemas/d/tables"
START = 1_900_000_000.0


@dataclasses.dataclass
class Served:
    server: RunningServer
    now: list[float]
    root: Path  # the writable table ``t``
    outside: Path  # a directory beside the table, with a file no URL may reach

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, token: str = ALICE) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Served:
    """Tables ``t`` (a writable copy, with ways out planted in it) and ``cdf`` in share ``s`` for alice
    and carol; share ``o`` for bob. Short token lifetimes on a clock the tests move."""
    base = tmp_path_factory.mktemp("security")
    root = base / "t"
    shutil.copytree(TABLES / "basic_partitioned", root)
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(OUTSIDE)
    (root / "escape").symlink_to(outside, target_is_directory=True)  # a directory link out of the table
    (root / "leak.txt").symlink_to(outside / "secret.txt")  # a file link out of the table
    cfg = {
        "version": 1,
        "shares": [
            {
                "name": "s",
                "schemas": [
                    {
                        "name": "d",
                        "tables": [
                            {"name": "t", "location": str(root), "id": "id-t", "historyShared": True},
                            {
                                "name": "cdf",
                                "location": str(TABLES / "cdf-table"),
                                "id": "id-cdf",
                                "historyShared": True,
                            },
                        ],
                    }
                ],
            },
            {"name": "o", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(root)}]}]},
        ],
        "recipients": [
            {"name": "alice", "tokens": [ALICE], "shares": ["s"]},
            {"name": "carol", "tokens": [CAROL], "shares": ["s"]},
            {"name": "bob", "tokens": [BOB], "shares": ["o"]},
        ],
        "preSignedUrlTimeoutSeconds": 300,
        "queryTablePageTokenTtlMs": 60_000,
        "refreshTokenTtlMs": 60_000,
    }
    now = [START]
    server = RunningServer(create_app(parse_config(cfg), clock=lambda: now[0], file_secret=FILE_SECRET))
    yield Served(server, now, root, outside)
    server.stop()


@pytest.fixture
def clock(served):
    """The server's clock, put back after the test."""
    yield served.now
    served.now[0] = START


def _error(resp, status: int, code: str | None = None) -> str:
    assert resp.status_code == status, (resp.status_code, resp.content[:300])
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = orjson.loads(resp.content)
    assert set(body) == {"errorCode", "message"}, body
    if code is not None:
        assert body["errorCode"] == code, body
    return body["message"]


def _lines(resp) -> list[dict]:
    assert resp.status_code == 200, resp.text
    return [orjson.loads(x) for x in resp.content.splitlines() if x.strip()]


def _file_urls(served: Served, table: str = "t") -> list[str]:
    with served.client() as c:
        return [x["file"]["url"] for x in _lines(c.post(f"{S}/{table}/query", json={})) if "file" in x]


# --- tokens never logged: the suite-wide scan ------------------------------------------------


def test_the_session_keeps_every_log_record_for_the_secret_scan():
    root = logging.getLogger()
    assert capture in root.handlers and root.level == logging.DEBUG and capture.level == logging.DEBUG
    assert ALICE in secrets_used and "test-token-alice" in secrets_used  # tests/server/conftest.py's tokens
    logging.getLogger("deltaport.test.scan").debug("a debug line the scan sees")
    assert ("deltaport.test.scan", "a debug line the scan sees") in capture.lines


def test_the_scanner_flags_a_logged_secret_by_logger_and_never_prints_it():
    secret = "scan-me-secret-9f8e7d"
    registry = SecretRegistry()
    registry.add(secret, label="a test secret")
    lines = LogCapture()
    leaky = logging.getLogger("deltaport.test.leaky")
    leaky.propagate = False  # kept out of the session's own capture: this leak is on purpose
    leaky.setLevel(logging.DEBUG)
    leaky.addHandler(lines)
    try:
        leaky.info("all quiet")
        assert find_leaks(lines.lines.items(), registry) == []
        leaky.info("Authorization: Bearer %s", secret)
        try:
            raise RuntimeError(f"token {secret} refused")
        except RuntimeError:
            leaky.exception("failed")  # in the traceback text only
    finally:
        leaky.removeHandler(lines)
    lines.add_output("process:deltaport serve", f"GET /x?token={secret} 200\nGET /y 200\n")
    leaks = find_leaks(lines.lines.items(), registry)
    assert [(leak.source, leak.lines) for leak in leaks] == [
        ("deltaport.test.leaky", 2),
        ("process:deltaport serve", 1),
    ]
    assert all(leak.secret_label == "a test secret" and secret not in str(leak) for leak in leaks)
    with pytest.raises(ValueError):
        registry.add("abc")  # too short to scan for without false alarms


def _inner_session(where: Path, test_file: str, workers: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, test_file]
    return subprocess.run(command, cwd=where, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
def test_a_session_that_logs_a_registered_secret_fails(tmp_path, workers):
    """The root conftest's hooks, in a session of their own (and one whose tests run in pytest-xdist
    workers, as the test script runs them): a clean one passes, a leaky one fails, and the report
    names the logger but not the secret."""
    here = Path(__file__).resolve().parents[1]
    shutil.copy(here / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(here / "secret_scan.py", tmp_path / "secret_scan.py")
    test = textwrap.dedent(
        """
        import logging
        from secret_scan import secrets_used
        secrets_used.add("inner-session-secret-42")

        def test_logs():
            logging.getLogger("inner.%s").debug("using %%s", "%s")
        """
    )
    (tmp_path / "test_clean.py").write_text(test % ("quiet", "nothing secret"))
    clean = _inner_session(tmp_path, "test_clean.py", workers)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    (tmp_path / "test_leaky.py").write_text(test % ("leaky", "inner-session-secret-42"))
    leaky = _inner_session(tmp_path, "test_leaky.py", workers)
    out = leaky.stdout + leaky.stderr
    assert leaky.returncode == 1, out
    assert "1 passed" in out and "secret scan: 1 leak(s)" in out and "inner.leaky: 1 line(s) contain" in out
    assert "inner-session-secret-42" not in out


def test_deltaport_serve_output_holds_no_token_and_no_url_signature(tmp_path):
    """A ``deltaport serve`` process (access log on, at INFO): its whole output goes to the scan."""
    port = free_port()
    config = tmp_path / "server.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "host": "127.0.0.1",
                "port": port,
                "shares": [
                    {
                        "name": "s",
                        "schemas": [
                            {"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}
                        ],
                    }
                ],
                "recipients": [{"name": "alice", "tokens": [ALICE], "shares": ["s"]}],
            }
        )
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "deltaport"), "serve", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.time() < deadline, "deltaport serve did not come up"
                time.sleep(0.2)
        auth = {"Authorization": f"Bearer {ALICE}"}
        r = httpx.post(base + S + "/t/query", json={}, headers=auth)
        url = next(x["file"]["url"] for x in _lines(r) if "file" in x)
        assert httpx.get(url).status_code == 200 and httpx.head(url).status_code == 200
        assert httpx.get(url.replace("X-Amz-Expires=3600", "X-Amz-Expires=3601")).status_code == 403
        assert httpx.get(base + S + "/t/version", headers=auth).status_code == 200
        assert httpx.get(base + P + "/shares", headers={"Authorization": f"Bearer {BOB}"}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(15)
    text = log.read_text(errors="replace")
    add_process_output("deltaport serve (test_security)", text)
    signature = dict(parse_qsl(urlsplit(url).query))["X-Amz-Signature"]
    for secret in (ALICE, BOB, signature, "X-Amz-"):
        assert secret not in text
    assert f"GET {unquote(urlsplit(url).path)} 200" in text  # the access log is there, path only


# --- the access log --------------------------------------------------------------------------


def test_the_access_log_has_neither_tokens_nor_query_strings(served, caplog):
    urls = _file_urls(served)
    with caplog.at_level(logging.INFO, logger="deltaport.access"), served.client() as c:
        c.get(P + "/shares")
        c.get(S + "/t/version")  # answered by the hot path
        c.post(S + "/t/query", json={"includeRefreshToken": True})
        c.get(S + "/cdf/changes", params={"startingVersion": 0, "maxFiles": 1})
        httpx.get(urls[0])
        httpx.head(urls[0])
        httpx.get(urls[0].replace("X-Amz-Expires=300", "X-Amz-Expires=301"))  # refused: logged all the same
        httpx.get(served.url + P + "/shares", headers={"Authorization": "Bearer not-a-token-at-all"})
    lines = [r.getMessage() for r in caplog.records if r.name == "deltaport.access"]
    path = unquote(urlsplit(urls[0]).path)
    for request in (
        f"GET {P}/shares 200",
        f"GET {S}/t/version 200",
        f"POST {S}/t/query 200",
        f"GET {S}/cdf/changes 200",
        f"GET {path} 200",
        f"HEAD {path} 200",
        f"GET {path} 403",
        f"GET {P}/shares 401",
    ):
        assert any(line.startswith(request + " ") for line in lines), (request, lines)
    signature = dict(parse_qsl(urlsplit(urls[0]).query))["X-Amz-Signature"]
    for line in lines:
        for secret in (ALICE, "not-a-token-at-all", signature, "X-Amz-", "?", "startingVersion"):
            assert secret not in line, line


# --- bearer tokens: hashed, compared in constant time ------------------------------------------


def test_bearer_tokens_are_compared_as_hashes_with_compare_digest(served, monkeypatch):
    import deltaport.server.sharing.registry as registry

    calls: list[tuple[bytes, bytes]] = []
    real = registry.hmac.compare_digest
    verdict: list[bool | None] = [None]

    def spy(a, b):
        calls.append((a, b))
        return real(a, b) if verdict[0] is None else verdict[0]

    monkeypatch.setattr(registry.hmac, "compare_digest", spy)
    digest = hashlib.sha256(ALICE.encode()).digest()
    with served.client() as c:
        assert c.get(P + "/shares").status_code == 200
        token_calls = [(a, b) for a, b in calls if digest in (a, b)]
        # found by its digest (a lookup that tells nothing of any token), then compared in constant time
        assert token_calls and all(len(a) == len(b) == 32 for a, b in token_calls)
        assert not any(ALICE.encode() in (a, b) or ALICE in (a, b) for a, b in calls)
        verdict[0] = False  # compare_digest decides: refused, the token being right or not
        _error(c.get(P + "/shares"), 401, "UNAUTHENTICATED")
    with served.client("a-token-nobody-was-given") as c:
        _error(c.get(P + "/shares"), 401, "UNAUTHENTICATED")


def _strings_in(root, limit: int = 200_000):
    """Every str and bytes reachable from ``root`` through containers, dataclasses and the
    attributes of deltaport's own objects (not through modules, functions or classes)."""
    seen, stack, found = set(), [root], []
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (str, bytes, bytearray)):
            found.append(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif type(obj).__module__.startswith("deltaport"):
            if dataclasses.is_dataclass(obj):
                stack.extend(getattr(obj, f.name, None) for f in dataclasses.fields(obj))
            stack.extend(getattr(obj, "__dict__", {}).values())
            stack.extend(getattr(obj, s, None) for s in getattr(type(obj), "__slots__", ()))
    return found


def test_the_server_keeps_no_plaintext_token(served):
    service = served.server.server.config.app.state.service  # the running app's own state
    kept = _strings_in(service)
    assert len(kept) > 20  # the walk reaches the config and the registry
    for token in (ALICE, CAROL, BOB):
        assert not any(token in s if isinstance(s, str) else token.encode() in s for s in kept)
    digests = {h for r in service.config.recipients for h in (t.digest for t in r.tokens)}
    assert digests == {hashlib.sha256(t.encode()).digest() for t in (ALICE, CAROL, BOB)}
    planted = dataclasses.replace(service.config.recipients[0], name=f"x{ALICE}x")
    assert any(ALICE in s for s in _strings_in([planted]) if isinstance(s, str))  # the walk would see one


# --- file URLs: bound to path, expiry and table ---------------------------------------------


def test_a_file_url_is_bound_to_its_path_expiry_and_table(served, clock):
    urls = _file_urls(served)
    other = _file_urls(served, "cdf")[0]
    assert httpx.get(urls[0]).status_code == 200
    first, second = urlsplit(urls[0]), urlsplit(urls[1])
    tampered = {
        "another file's path": first._replace(path=second.path).geturl(),
        "a longer expiry": urls[0].replace("X-Amz-Expires=300", "X-Amz-Expires=3000"),
        "another table's key": first._replace(path=urlsplit(other).path).geturl(),
    }
    date = dict(parse_qsl(first.query))["X-Amz-Date"]
    later = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ")) + 1))
    tampered["a later signing time"] = urls[0].replace(f"X-Amz-Date={date}", f"X-Amz-Date={later}")
    key, other_key = first.path.split("/")[3], urlsplit(other).path.split("/")[3]
    tampered["the key swapped"] = urls[0].replace(f"/{key}/", f"/{other_key}/")
    for what, url in tampered.items():
        r = httpx.get(url)
        assert "signature does not match" in _error(r, 403, "PERMISSION_DENIED"), what
        assert not r.content.startswith(b"PAR1"), what
    clock[0] = START + 301  # past the URL's expiry
    message = _error(httpx.get(urls[0]), 403, "PERMISSION_DENIED")
    assert "expired" in message
    clock[0] = START - 3600  # and before it was signed
    assert "future" in _error(httpx.get(urls[0]), 403, "PERMISSION_DENIED")


def test_a_file_url_is_bound_to_the_recipient_it_was_issued_to(served):
    """A URL names the recipient it was issued to, under the signature; served only while that
    recipient may read the table. Re-signed with the server's own key, so the check reached is the
    recipient's, not the signature's."""
    url = _file_urls(served)[0]  # alice's, for table t of share s
    with served.client(BOB) as c:
        answer = _lines(c.post("/delta-sharing/shares/o/schemas/d/tables/t/query", json={}))
        bobs = [x["file"]["url"] for x in answer if "file" in x]
    alice_key, bob_key = urlsplit(url).path.split("/")[3], urlsplit(bobs[0]).path.split("/")[3]
    table, _, alice = alice_key.partition("~")
    assert alice and bob_key.partition("~")[2] not in ("", alice)  # each URL names its recipient
    assert httpx.get(bobs[0]).status_code == 200
    signer = _signer(served, url)
    cases = {
        "bob's key on share s's table": f"{table}~{bob_key.partition('~')[2]}",
        "an unknown recipient": f"{table}~{'0' * 16}",
        "no recipient": table,
    }
    for what, key in cases.items():
        path = urlsplit(url).path.replace(f"/{alice_key}/", f"/{key}/")
        signed, _ = signer.presign_encoded(path, expires_in=60, now=START)
        message = _error(httpx.get(signed), 403, "PERMISSION_DENIED")
        assert "signature" not in message and "recipient" in message, what


# --- no read outside a table's root -----------------------------------------------------------


def _raw_get(port: int, target: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One request with the request target sent byte for byte (HTTP clients normalise ``..``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    if headers.get("transfer-encoding") == "chunked":
        raise AssertionError("unexpected chunked answer")
    return int(status_line.split()[1]), headers, body


def _signer(served: Served, url: str) -> SigV4Presigner:
    """The server's own URL signer (its key and secret), to sign paths no table would issue."""
    access_key = dict(parse_qsl(urlsplit(url).query))["X-Amz-Credential"].split("/")[0]
    return SigV4Presigner(served.url, access_key, FILE_SECRET, region="us-east-1", service="s3")


ESCAPES = {
    "dot-dot": "../outside/secret.txt",
    "dot-dot deeper": "letter=a/../../outside/secret.txt",
    "%2e%2e": "%2e%2e/outside/secret.txt",
    "%2E%2E": "%2E%2E/outside/secret.txt",
    "mixed .%2e": ".%2e/outside/secret.txt",
    "%2f separators": "..%2foutside%2fsecret.txt",
    "%2F separators": "..%2Foutside%2Fsecret.txt",
    "%5c separators": "..%5coutside%5csecret.txt",
    "backslashes": "..\\outside\\secret.txt",
    "double encoding": "%252e%252e/outside/secret.txt",
    "double-encoded separator": "..%252foutside%252fsecret.txt",
    "absolute": "%2F{outside}/secret.txt",
    "directory symlink": "escape/secret.txt",
    "file symlink": "leak.txt",
    "NUL": "leak.txt%00.parquet",
    "NUL alone": "%00",
    "dot segment": "./leak.txt",
    "empty segment": "letter=a//x",
    "long name": "a" * 300,
    "long path": "a/" * 2100 + "x",
    "very long path": "b" * 40_000,
    "upper-case file name": "{upper}",
}


@pytest.mark.parametrize("how", ESCAPES)
def test_no_signed_path_reads_outside_the_table(served, how):
    url = _file_urls(served)[0]
    parts = urlsplit(url)
    table_prefix = "/".join(parts.path.split("/")[:4])  # /delta-sharing/files/<table key>
    assert table_prefix.startswith(P + "/files/") and table_prefix.count("/") == 3
    real_name = parts.path.rsplit("/", 1)[1]
    rel = ESCAPES[how].format(outside=str(served.outside).replace("/", "%2F"), upper="letter=a/" + real_name.upper())
    raw = f"{table_prefix}/{rel}"
    # signed as the server canonicalises a path (decoded once, S3-encoded), sent as written
    signed, _ = _signer(served, url).presign_encoded(uri_encode_path(unquote(raw)), expires_in=60, now=START)
    target = raw + "?" + urlsplit(signed).query
    for method in ("GET", "HEAD"):
        status, headers, body = _raw_get(served.server.port, target, method)
        assert 400 <= status < 500, (how, method, status, body[:200])
        assert OUTSIDE not in body and not body.startswith(b"PAR1"), (how, method)
        if method == "GET":
            assert headers["content-type"].startswith("application/json"), (how, headers)
            error = orjson.loads(body)
            assert set(error) == {"errorCode", "message"}, error
            assert "signature" not in error["message"], error  # the path check was reached


def test_the_signer_used_above_is_the_servers_own(served):
    """A real file's path signed the same way is served: the refusals above are the path check's."""
    url = _file_urls(served)[0]
    signed, _ = _signer(served, url).presign_encoded(urlsplit(url).path, expires_in=60, now=START)
    status, _, body = _raw_get(served.server.port, signed[len(served.url) :])
    assert status == 200 and body.startswith(b"PAR1")


@pytest.mark.parametrize("prefix", [P + "/FILES/", P + "/Files/", "/DELTA-SHARING/files/", P + "//files/"])
def test_the_files_route_is_not_reached_in_another_spelling(served, prefix):
    url = _file_urls(served)[0]
    parts = urlsplit(url)
    target = prefix + parts.path.split("/files/", 1)[1] + "?" + parts.query
    status, headers, body = _raw_get(served.server.port, target)
    assert status == 404 and headers["content-type"].startswith("application/json"), (status, body[:200])
    assert not body.startswith(b"PAR1")


# --- page, refresh and listing tokens cannot be replayed --------------------------------------


def _end(out: list[dict]) -> dict:
    return out[-1]["endStreamAction"]


def test_a_page_token_is_bound_to_its_recipient_and_expires(served, clock):
    with served.client() as alice, served.client(CAROL) as carol:
        token = _end(_lines(alice.post(S + "/t/query", json={"maxFiles": 1})))["nextPageToken"]
        assert _lines(alice.post(S + "/t/query", json={"maxFiles": 1, "pageToken": token}))  # alice may go on
        message = _error(carol.post(S + "/t/query", json={"maxFiles": 1, "pageToken": token}), 400)
        assert message == f"Error decoding the page token: {token}."  # carol sees the same table: still refused
        changes = {"startingVersion": 0, "maxFiles": 1}
        feed = _end(_lines(alice.get(S + "/cdf/changes", params=changes)))["nextPageToken"]
        _error(carol.get(S + "/cdf/changes", params={**changes, "pageToken": feed}), 400)
        message = _error(alice.get(S + "/t/changes", params={**changes, "pageToken": feed}), 400)
        assert "does not match the table" in message
        clock[0] = START + 61  # the page-token lifetime is 60 s
        message = _error(alice.post(S + "/t/query", json={"maxFiles": 1, "pageToken": token}), 400)
        assert message == "The page token has expired. Please restart the query."
        assert "expired" in _error(alice.get(S + "/cdf/changes", params={**changes, "pageToken": feed}), 400)


def test_a_refresh_token_is_bound_to_its_recipient_and_expires(served, clock):
    with served.client() as alice, served.client(CAROL) as carol:
        refresh = _end(_lines(alice.post(S + "/t/query", json={"includeRefreshToken": True})))["refreshToken"]
        again = {"includeRefreshToken": True, "refreshToken": refresh}
        assert _lines(alice.post(S + "/t/query", json=again))
        assert _error(carol.post(S + "/t/query", json=again), 400) == f"Error decoding refresh token: {refresh}."
        clock[0] = START + 61
        message = _error(alice.post(S + "/t/query", json=again), 400)
        assert message == "The refresh token has expired. Please restart the query."


def test_a_listing_token_is_bound_to_its_recipient_listing_and_lifetime(served, clock):
    with served.client() as alice, served.client(CAROL) as carol, served.client(BOB) as bob:
        token = alice.get(S, params={"maxResults": 1}).json()["nextPageToken"]
        assert alice.get(S, params={"maxResults": 1, "pageToken": token}).status_code == 200
        for who, path in ((carol, S), (bob, P + "/shares/o/schemas/d/tables"), (alice, P + "/shares/s/all-tables")):
            assert "nextPageToken" in _error(who.get(path, params={"maxResults": 1, "pageToken": token}), 400)
        clock[0] = START + 61
        _error(alice.get(S, params={"maxResults": 1, "pageToken": token}), 400)
