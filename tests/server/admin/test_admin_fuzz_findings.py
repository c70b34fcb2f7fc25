"""One regression test per finding of the admin API's fuzzing (test_admin_fuzz.py,
``benchmarks/fuzz_server.py --admin``) and of probing its edges, each over HTTP against a real
server, on SQLite and on PostgreSQL where the two databases differ.

Every one of these answered 500 (or a 503 for a client's mistake, or gave away where the catalog
lives) before its fix; each must now be a 4xx in Unity Catalog's shape whose message names the fix.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.catalog.names import check_name
from deltaport.catalog.store import CatalogDB
from deltaport.errors import InvalidParameter
from deltaport.server import create_app, parse_config
from deltaport.server.errors import json_error
from postgres import postgres_server  # noqa: F401  (the session's cluster)

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"
ADMIN = "findings-admin-token-8d3f6b27"
secrets_used.add(ADMIN, label="the findings tests' admin token")
U = "/api/2.1/unity-catalog"
BEYOND_64_BITS = 2**63


class Admin:
    """A server over loopback on the catalog at ``url`` and an admin client of it."""

    def __init__(self, url: str) -> None:
        self.db = CatalogDB(url)
        config = parse_config({"version": 1, "catalog": url, "adminTokens": [ADMIN], "catalogPollSeconds": 0.2})
        self.server = RunningServer(create_app(config, catalog=self.db))
        self.http = httpx.Client(base_url=self.server.url + U, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)

    def send(self, method: str, path: str, body: object = None, *, raw: bytes | None = None) -> httpx.Response:
        """A request whose JSON body is sent exactly as ``raw`` when given (unpaired surrogates,
        NUL characters and numbers beyond 64 bits are valid JSON)."""
        content = raw if raw is not None else orjson.dumps(body) if body is not None else None
        return self.http.request(method, path, content=content, headers={"Content-Type": "application/json"})

    def stop(self) -> None:
        self.http.close()
        self.server.stop()
        self.db.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def admin(request, tmp_path) -> Iterator[Admin]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    made = Admin(url)
    yield made
    made.stop()


@pytest.fixture
def root(tmp_path) -> Path:
    folder = tmp_path / "root"
    shutil.copytree(TABLES / "basic_partitioned", folder / "orders")
    return folder


def refused(answer: httpx.Response, status: int, *needles: str) -> str:
    """``answer`` is a ``status`` in Unity Catalog's shape whose message holds every needle."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] and body["message"], body
    for needle in needles:
        assert needle in body["message"], body["message"]
    return body["message"]


def _catalog(admin: Admin, root: Path) -> None:
    """Catalog main rooted at ``root``, schema main.sales, table main.sales.orders, share s holding
    it, recipient r; catalog other without a root, with schema other.misc."""
    for method, path, body in [
        ("POST", "/catalogs", {"name": "main", "storage_root": str(root)}),
        ("POST", "/schemas", {"name": "sales", "catalog_name": "main"}),
        (
            "POST",
            "/tables",
            {
                "name": "orders",
                "catalog_name": "main",
                "schema_name": "sales",
                "storage_location": str(root / "orders"),
            },
        ),
        ("POST", "/shares", {"name": "s"}),
        ("PATCH", "/shares/s", {"updates": [{"action": "ADD", "data_object": {"name": "main.sales.orders"}}]}),
        ("POST", "/recipients", {"name": "r"}),
        ("POST", "/catalogs", {"name": "other"}),
        ("POST", "/schemas", {"name": "misc", "catalog_name": "other"}),
    ]:
        answer = admin.send(method, path, body)
        assert answer.status_code == 200, answer.text


# --- numbers beyond 64 bits ------------------------------------------------------------------------


def test_numbers_beyond_64_bits_are_refused_not_a_500(admin, root):
    """Was: SQLite's driver raised OverflowError and PostgreSQL NumericValueOutOfRange: a 500."""
    _catalog(admin, root)
    bound = "less than or equal to 9223372036854775807"
    huge = str(BEYOND_64_BITS).encode()
    refused(admin.send("POST", "/recipients", raw=b'{"name": "x", "expiration_time": ' + huge + b"}"), 400, bound)
    refused(admin.send("PATCH", "/recipients/r", raw=b'{"expiration_time": ' + huge + b"}"), 400, bound)
    obj = b'{"updates": [{"action": "UPDATE", "data_object": {"name": "main.sales.orders", "start_version": '
    refused(admin.send("PATCH", "/shares/s", raw=obj + huge + b"}}]}"), 400, bound)
    refused(
        admin.send("POST", "/recipients/r/rotate-token", {"existing_token_expire_in_seconds": 2**62}),
        400,
        "existing_token_expire_in_seconds: Input should be less than or equal to",
    )
    almost = (BEYOND_64_BITS - 1) // 1000  # allowed by the body, but now + that many seconds is too far
    refused(
        admin.send("POST", "/recipients/r/rotate-token", {"existing_token_expire_in_seconds": almost}),
        400,
        "is too far in the future: give at most",
    )
    assert [t["id"] for t in admin.send("GET", "/recipients/r").json()["tokens"]]  # r as it was


def test_the_store_refuses_numbers_beyond_64_bits_itself(admin):
    with pytest.raises(InvalidParameter, match="expiration_time of recipient 'x' is beyond"):
        admin.db.create_recipient("x", expiration_time=BEYOND_64_BITS)
    admin.db.create_recipient("y")
    with pytest.raises(InvalidParameter, match="too far in the future"):
        admin.db.rotate_token("y", BEYOND_64_BITS // 1000)


# --- text no database stores -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/shares", b'{"name": "s\\ud800"}', "name"),
        ("/shares", b'{"name": "t", "comment": "\\udc00"}', "comment"),
        ("/shares", b'{"name": "t", "comment": "a\\u0000b"}', "comment"),
        ("/catalogs", b'{"name": "c", "storage_root": "/data/\\u0000"}', "storage_root"),
        ("/recipients", b'{"name": "x", "properties_kvpairs": {"properties": {"\\ud800": "v"}}}', "a key of"),
        ("/recipients", b'{"name": "x", "properties_kvpairs": {"properties": {"k": "v\\u0000"}}}', "properties.k"),
        (
            "/tables",
            b'{"name": "t", "catalog_name": "other", "schema_name": "misc", "storage_location": "/x/\\ud800"}',
            "storage_location",
        ),
    ],
    ids=["surrogate-name", "surrogate-comment", "nul-comment", "nul-root", "surrogate-key", "nul-property", "path"],
)
def test_nul_characters_and_unpaired_surrogates_are_refused_not_a_500(admin, root, path, raw, field):
    """Was: the drivers could not encode an unpaired surrogate (UnicodeEncodeError, also from the
    file system for a location) and PostgreSQL refuses NUL in text: a 500."""
    _catalog(admin, root)
    refused(admin.send("POST", path, raw=raw), 400, field, "holds a NUL character or an unpaired surrogate")
    assert [s["name"] for s in admin.send("GET", "/shares").json()["shares"]] == ["s"]


def test_the_store_refuses_text_its_database_cannot_hold(admin):
    """The last line behind the admin API's own checks: the database's refusal is a 400."""
    with pytest.raises(InvalidParameter, match="cannot store a value of this call"):
        admin.db.create_share("fine", comment="\ud800")
    assert admin.db.list_shares() == []


def test_an_echoed_unpaired_surrogate_cannot_break_an_error_answer():
    answer = json_error(400, "INVALID_PARAMETER_VALUE", "share 'a\ud800' does not exist", unity=True)
    assert orjson.loads(answer.body)["message"] == "share 'a?' does not exist"


# --- names that grow when lower-cased --------------------------------------------------------------


def test_a_name_too_long_once_lower_cased_is_refused_not_a_500(admin):
    """Was: 'İ' lower-cases to two characters, so a 255-character name overflowed PostgreSQL's
    VARCHAR(255) of the lower-cased name: a 500."""
    rule = "at most 255 characters (lower-cased too)"
    refused(admin.send("POST", "/shares", {"name": "İ" * 255}), 400, rule)
    refused(admin.send("POST", "/recipients", {"name": "İ" * 128}), 400, rule)
    assert admin.send("POST", "/shares", {"name": "İ" * 127}).status_code == 200  # 254 once lower-cased
    assert check_name("x" * 255, "share", allow_dot=True)


# --- table locations: the rules first, the storage after -------------------------------------------


def test_a_location_is_checked_against_the_rules_before_it_is_read(admin, root):
    """Was: the location was read first and checked after, so a location outside the storage root
    was fetched (an s3 URL went to the network and came back a 503 that the SDK retries for five
    minutes), a relative path was read from the server's working directory, and an invalid URL
    or an over-long path was a 500 or a 503."""
    _catalog(admin, root)

    def create(catalog: str, location: str) -> httpx.Response:
        schema = "sales" if catalog == "main" else "misc"
        body = {"name": "t", "catalog_name": catalog, "schema_name": schema, "storage_location": location}
        return admin.send("POST", "/tables", body)

    start = time.monotonic()
    refused(create("main", "s3://some-bucket/tables/t"), 400, "is outside the storage root of catalog 'main'")
    refused(create("main", str(TABLES / "basic_partitioned")), 400, "is outside the storage root")
    assert time.monotonic() - start < 5  # refused by the rule, nothing fetched
    refused(create("other", "orders"), 400, "must be an absolute path or a URL such as s3://<bucket>/<path>")
    refused(create("other", "http://[::1/t"), 400, "is not a valid URL: write it as <scheme>://<authority>/<path>")
    refused(create("other", "/" + "a" * 300), 400, "too long for a local path: at most 255 bytes per folder name")
    refused(create("other", "/data/" + "b/" * 2100), 400, "4095 in all")
    refused(create("other", "file://host/data/t"), 400, "'file://' and an absolute path, no host")
    assert admin.send("GET", "/tables/main.sales.t/exists").json() == {"table_exists": False}
    assert admin.send("GET", "/tables/other.misc.t/exists").json() == {"table_exists": False}


# --- the first token of a new recipient --------------------------------------------------------------


def test_a_new_recipient_comes_with_its_first_token_and_link(admin):
    """Was (in a change under way): the recipient was read back before its first token was
    stored, so creating one answered a 500."""
    made = admin.send("POST", "/recipients", {"name": "fresh"})
    assert made.status_code == 200, made.text
    body = made.json()
    assert len(body["tokens"]) == 1 and body["tokens"][0]["activation_url"] == body["activation_url"]
    assert "/delta_sharing/activate/" in body["activation_url"]


# --- an unavailable database, named to no one ------------------------------------------------------


def test_an_unavailable_catalog_is_not_named_to_clients(tmp_path):
    """Was: the 503's message held the catalog database's URL (the SQLite file's path; the
    PostgreSQL host, port, user and database), on the public activation route too."""
    folder = tmp_path / "private-catalog-folder"
    folder.mkdir()
    admin = Admin(f"sqlite:///{folder / 'catalog.db'}")
    try:
        link = admin.send("POST", "/recipients", {"name": "r"}).json()["activation_url"].rsplit("/", 1)[1]
        folder.rename(tmp_path / "moved")
        admin.db.close()  # the pooled connections go, as with a lost volume
        for answer in (
            admin.send("GET", "/shares"),
            httpx.get(f"{admin.server.url}{U}/public/data_sharing_activation/{link}"),
        ):
            message = refused(answer, 503, "the catalog database cannot be used right now")
            assert "private-catalog-folder" not in message and "sqlite" not in message
            assert int(answer.headers["Retry-After"]) > 0
    finally:
        (tmp_path / "moved").rename(folder)
        admin.stop()


def test_a_catalog_file_that_is_no_database_is_503_and_recipients_keep_reading(tmp_path, root):
    """Was: SQLite's 'file is not a database' (a DatabaseError that is no OperationalError) was a
    500; now the admin API is unavailable (503) while recipients read the catalog last loaded."""
    path = tmp_path / "catalog.db"
    admin = Admin(f"sqlite:///{path}")
    try:
        _catalog(admin, root)
        link = admin.send("POST", "/recipients/r/rotate-token", {"existing_token_expire_in_seconds": 0})
        token = link.json()["activation_url"].rsplit("/", 1)[1]
        bearer = httpx.get(f"{admin.server.url}{U}/public/data_sharing_activation/{token}").json()["bearerToken"]
        secrets_used.add(bearer, label="a findings test recipient's bearer token")
        grant = {"changes": [{"principal": "r", "add": ["SELECT"]}]}
        assert admin.send("PATCH", "/shares/s/permissions", grant).status_code == 200
        for file in tmp_path.glob("catalog.db*"):  # the database, its WAL and its index overwritten
            with open(file, "r+b") as f:
                f.write(b"\xa5" * file.stat().st_size)
        refused(admin.send("GET", "/shares"), 503, "the catalog database cannot be used right now")
        refused(admin.send("POST", "/shares", {"name": "t"}), 503, "cannot be used right now")
        recipient = httpx.get(
            f"{admin.server.url}/delta-sharing/shares/s/all-tables", headers={"Authorization": f"Bearer {bearer}"}
        )
        assert recipient.status_code == 200 and [t["name"] for t in recipient.json()["items"]] == ["orders"]
    finally:
        admin.stop()
