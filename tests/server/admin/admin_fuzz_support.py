"""Schemathesis over the admin API of a real deltaport server on loopback: the catalog it serves,
the generated requests, and the properties every answer must have. Used by
tests/server/admin/test_admin_fuzz.py (bounded, fixed seed) and ``benchmarks/fuzz_server.py --admin``
(10,000+ requests).

The server serves a SQLite catalog that holds real objects (:class:`AdminWorld`): a catalog whose
``storage_root`` is a folder of copied corpus tables, a catalog without one, schemas, registered
tables, shares holding tables and a whole schema, recipients (one activated, one with a pending
activation link) and grants. Requests come from the server's own ``/openapi.json``: every admin
operation (and the public activation routes) in both generation modes. Each generated request is
then steered a little so that it reaches the code behind the outer checks: most carry the admin
token (some none, a wrong one, or a recipient's bearer token), most name objects that exist (in any
letter case), creates sometimes take a name already taken, renames sometimes a taken name, table
locations are often a real table inside the storage root, or one outside it, or no Delta table,
page tokens are sometimes real ones and activation links sometimes live ones. After a write that
removed or renamed something the catalog is seeded again, so the next requests find it.

Properties of every answer: no 5xx; every 4xx is Unity Catalog's JSON error (exactly ``error_code``
and ``message``, both non-empty strings; the public activation page, outside the admin prefix,
answers in the protocol's shape); no body or header holds the admin or a recipient's token (or their
digests), the file-URL or page-token secret, where the catalog database is, the server's source, a
traceback, or an absolute path that is neither under a registered location nor named by the request;
a 2xx body is a JSON object.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import requests
from hypothesis import strategies as st
from schemathesis import GenerationMode

import deltaport
from deltaport.catalog.model import ObjectType, SharedObject
from deltaport.catalog.store import CatalogDB, ObjectUpdate, PermissionChange
from deltaport.errors import AlreadyExists, ResourceNotFound
from deltaport.server import create_app, parse_config
from deltaport.server.admin.activation import ACTIVATION_PAGE
from deltaport.server.errors import ADMIN_PREFIX

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fuzz_support, one folder up
from fuzz_support import (
    PROTOCOL_ERROR,
    TABLES,
    TRACEBACK_MARKS,
    Finding,
    Tally,
    error_shape,
    load_schema,
    lowered_headers,
    run_examples,
)

__all__ = ["ADMIN_TOKEN", "AdminFuzzer", "AdminWorld", "Tally", "admin_answer_problems", "admin_app", "load_schema"]

ADMIN_TOKEN = "fuzz-admin-token-7c41e0b9d2a6"
FILE_SECRET = b"fuzz-admin-file-secret-93ad51c0"
TOKEN_SECRET = "fuzz-admin-page-secret-2be8f4"

#: The corpus tables copied under the storage root, by the name of their folder there.
COPIES = {
    "orders": "basic_partitioned",
    "changes": "cdf-table",
    "dv": "table-with-dv-small",
    "mapped": "cdf-column-mapping-name-mode",
    "spare": "external-table-different-nullability",  # not registered: a create may take it
}
SEED_TABLES = {"main.sales.orders": "orders", "main.sales.changes": "changes", "main.ops.dv": "dv"}
SEED_TABLES["main.ops.mapped"] = "mapped"
NAMES = {
    "catalogs": ["main", "other"],
    "schemas": ["main.sales", "main.ops", "other.misc"],
    "tables": list(SEED_TABLES),
    "shares": ["fuzz", "whole", "empty"],
    "recipients": ["alice", "bob", "carol"],
}
GRANTS = {"alice": ("fuzz", "whole"), "bob": ("empty",)}
SHARE_OBJECTS = {
    "fuzz": [
        SharedObject("main.sales.orders", shared_as="retail.orders", history_shared=True),
        SharedObject("main.sales.changes", cdf_enabled=True),
    ],
    "whole": [SharedObject("main.ops", data_object_type=ObjectType.SCHEMA)],
    "empty": [],
}


@dataclasses.dataclass
class AdminWorld:
    """The catalog the fuzzed server serves, and what the fuzzer knows of it: the live names,
    the tokens it must never see in an answer, activation links, real page tokens and every
    location a table was registered at."""

    base: Path
    db: CatalogDB
    bearers: list[str] = dataclasses.field(default_factory=list)
    activations: list[str] = dataclasses.field(default_factory=list)
    page_tokens: dict[str, tuple[str, dict[str, str]]] = dataclasses.field(default_factory=dict)
    locations: set[str] = dataclasses.field(default_factory=set)
    created_tables: list[str] = dataclasses.field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def db_dir(self) -> Path:
        return self.base / "db"

    @classmethod
    def create(cls, base: Path) -> AdminWorld:
        (base / "root").mkdir(parents=True)
        for copy, source in COPIES.items():
            shutil.copytree(TABLES / source, base / "root" / copy)
        (base / "root" / "not-delta").mkdir()
        (base / "root" / "not-delta" / "notes.txt").write_text("no Delta table here\n")
        (base / "db").mkdir()
        world = cls(base, CatalogDB(f"sqlite:///{base / 'db' / 'catalog.db'}"))
        world.locations.add(str(world.root))
        world.seed()
        return world

    def seed(self) -> None:
        """Make sure every seeded object exists (idempotent). When a seeded table's location is held
        by a table under another name (its catalog or schema was renamed), the catalogs start over."""
        try:
            self._seed_tables()
        except AlreadyExists:
            for catalog in self.db.list_catalogs():
                self.db.delete_catalog(catalog.name, force=True)
            self._seed_tables()
        for name, objects in SHARE_OBJECTS.items():
            self._seed_share(name, objects)
        for name in NAMES["recipients"]:
            self._seed_recipient(name)

    def _seed_tables(self) -> None:
        for name in NAMES["catalogs"]:
            _ensure(lambda n=name: self.db.get_catalog(n), lambda n=name: self._make_catalog(n))
        for full in NAMES["schemas"]:
            catalog, schema = full.split(".")
            _ensure(lambda f=full: self.db.get_schema(f), lambda c=catalog, s=schema: self.db.create_schema(c, s))
        for full, folder in SEED_TABLES.items():
            if not self.db.table_exists(full):
                self.db.create_table(*full.split("."), str(self.root / folder))

    def _make_catalog(self, name: str) -> None:
        self.db.create_catalog(name, storage_root=str(self.root) if name == "main" else None)

    def _seed_share(self, name: str, objects: list[SharedObject]) -> None:
        _ensure(lambda: self.db.get_share(name), lambda: self.db.create_share(name))
        held = {o.name.lower() for o in self.db.get_share(name, include_objects=True).objects}
        missing = [ObjectUpdate("ADD", o) for o in objects if o.name.lower() not in held]
        if not missing:
            return
        try:
            self.db.update_share(name, updates=missing)
        except AlreadyExists:  # an UPDATE gave another object the shared_as a seeded one needs
            self.db.delete_share(name)
            self._seed_share(name, objects)

    def _seed_recipient(self, name: str) -> None:
        try:
            self.db.get_recipient(name)
        except ResourceNotFound:
            _, activation = self.db.create_recipient(name)
            if name == "alice":
                _, bearer, _ = self.db.activate(activation)
                self.bearers.append(bearer)
            else:
                self.activations.append(activation)
        for share in GRANTS.get(name, ()):
            self.db.update_permissions(share, [PermissionChange(name, ("SELECT",))])

    def collect_page_tokens(self, base_url: str) -> None:
        """A real next-page token of each listing that has two items or more."""
        listings = {
            "/catalogs": {},
            "/shares": {},
            "/recipients": {},
            "/schemas": {"catalog_name": "main"},
            "/tables": {"catalog_name": "main", "schema_name": "sales"},
        }
        with requests.Session() as s:
            for path, query in listings.items():
                r = s.get(
                    base_url + ADMIN_PREFIX + path,
                    params={**query, "max_results": 1},
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    timeout=30,
                )
                r.raise_for_status()
                self.page_tokens[ADMIN_PREFIX + path] = (r.json()["next_page_token"], query)

    def forbidden(self) -> dict[str, str]:
        """What no answer may hold, by a label safe to print."""
        out = {
            "the admin token": ADMIN_TOKEN,
            "the admin token's digest": hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest(),
            "the file-URL secret": FILE_SECRET.decode(),
            "the page-token secret": TOKEN_SECRET,
            "where the catalog database is": str(self.db_dir),
            "the server's source": str(Path(deltaport.__file__).parent),
        }
        for i, bearer in enumerate(self.bearers):
            out[f"recipient bearer token #{i}"] = bearer
            out[f"recipient bearer token #{i}'s digest"] = hashlib.sha256(bearer.encode()).hexdigest()
        for mark in TRACEBACK_MARKS:
            out[f"a traceback ({mark!r})"] = mark
        return out


def _ensure(get, make) -> None:
    try:
        get()
    except ResourceNotFound:
        make()


def admin_app(world: AdminWorld):
    config = parse_config(
        {
            "version": 1,
            "catalog": f"sqlite:///{world.db_dir / 'catalog.db'}",
            "adminTokens": [ADMIN_TOKEN],
            "tokenSecret": TOKEN_SECRET,
            "catalogPollSeconds": 0.5,
        }
    )
    return create_app(config, catalog=world.db, file_secret=FILE_SECRET)


# --- the properties of an answer -----------------------------------------------------------------

#: An absolute path of two or more segments inside an answer.
_PATH = re.compile(r"(?<![\w.~:/\-%])/[^\s/'\"()<>,;:\\]+(?:/[^\s/'\"()<>,;:\\]+)+")
_URL_PATHS = (ADMIN_PREFIX + "/", ACTIVATION_PAGE + "/", "/delta-sharing/", "/docs")


def request_strings(case) -> list[str]:
    """Every string the request carried (path, query and body values, decoded), to tell a path the
    request named from one the server gave away."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.extend((value, unquote(value)))
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    walk(dict(case.path_parameters or {}))
    walk(dict(case.query or {}))
    walk(case.body if not isinstance(case.body, (bytes, bytearray)) else case.body.decode("latin-1"))
    return out


def admin_answer_problems(
    method: str, route: str, response, forbidden: dict[str, str], allowed: list[str], named: list[str]
) -> list[str]:
    """What is wrong with one answer (empty when nothing is). ``allowed``: locations an answer may
    show (registered ones); ``named``: the strings the request carried."""
    status = response.status_code
    headers = lowered_headers(response)
    body = response.content
    problems = []
    if status >= 500:
        problems.append(f"server error {status}")
    elif status >= 400:
        unity = route.split(" ", 1)[1].startswith(ADMIN_PREFIX)
        problems += error_shape(headers, body, ("error_code", "message") if unity else PROTOCOL_ERROR)
    elif 200 <= status < 300 and "html" not in headers.get("content-type", ""):
        try:
            if not isinstance(orjson.loads(body), dict):
                problems.append("a 2xx answer is not a JSON object")
        except orjson.JSONDecodeError:
            problems.append("a 2xx answer does not parse as JSON")
    text = "\n".join(f"{k}: {v}" for k, v in headers.items()) + "\n" + body.decode("utf-8", "replace")
    problems += [f"leaks {label}" for label, secret in forbidden.items() if secret in text]
    for path in _PATH.findall(text):
        if (
            not path.startswith(_URL_PATHS)
            and not any(path.startswith(a) for a in allowed)
            and not any(path in s for s in named)
        ):
            problems.append(f"shows a path the request did not name ({len(path)} characters)")
            break
    return problems


# --- steering --------------------------------------------------------------------------------------

_AUTH = st.sampled_from(["admin"] * 16 + ["none", "wrong", "recipient", "lower-case scheme"])
_LOCATION = st.sampled_from(
    ["spare"] * 4
    + ["registered", "root", "not delta", "log", "outside", "traversal", "file url", "generated"]
    + ["remote", "relative"] * 2
)
_STEER = st.fixed_dictionaries(
    {
        "auth": _AUTH,
        "name": st.sampled_from(["real"] * 3 + ["generated"]),
        "case": st.sampled_from(["as is", "upper", "title"]),
        "create": st.sampled_from(["generated", "fresh", "fresh", "taken"]),
        "rename": st.sampled_from(["generated", "fresh", "taken", "absent"]),
        "location": _LOCATION,
        "page": st.sampled_from(["generated", "real", "real", "absent"]),
        "privileges": st.sampled_from(["generated", "select"]),
        "kinds": st.sampled_from(["generated"] + ["valid"] * 3),
        "inject": st.sampled_from(["nothing"] * 12 + ["NUL", "unpaired surrogate", "a number beyond 64 bits"]),
    }
)


class AdminFuzzer:
    """Runs the admin operations of ``schema`` against ``base_url`` (serving ``world``); answers are
    judged by :func:`admin_answer_problems`, and what was sent and seen goes to ``tally``."""

    def __init__(self, schema, base_url: str, world: AdminWorld, tally: Tally) -> None:
        self.schema = schema
        self.base_url = base_url
        self.world = world
        self.tally = tally
        self.session = requests.Session()

    def operations(self) -> list:
        found = [result.ok() for result in self.schema.get_all_operations()]
        return [op for op in found if op.path.startswith((ADMIN_PREFIX, ACTIVATION_PAGE))]

    def run(self, examples: int, seed: int, modes=(GenerationMode.POSITIVE, GenerationMode.NEGATIVE)) -> None:
        """``examples`` generated requests (at most) per operation and mode, reproducibly from ``seed``."""
        start = time.perf_counter()
        try:
            for index, operation in enumerate(self.operations()):
                for mode in modes:
                    self._run_operation(operation, mode, examples, seed * 1000 + index * 2 + (mode == modes[0]))
        finally:
            self.tally.seconds += time.perf_counter() - start

    def _run_operation(self, operation, mode, examples: int, seed: int) -> None:
        run_examples(operation, mode, examples, seed, _STEER, self.send)

    def send(self, case, how: dict, pick: int) -> None:
        route = f"{case.method} {case.path}"
        case.headers.pop("Authorization", None)
        case.headers.update(self._auth(how["auth"]))
        if how["name"] == "real":
            Steer(self.world, how, pick).apply(case)
        named = request_strings(case)
        try:
            response = case.call(base_url=self.base_url, session=self.session, timeout=60)
        except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            self._fail(route, None, f"connection failed: {type(exc).__name__}", case)
            return
        except (requests.exceptions.RequestException, ValueError, UnicodeError) as exc:
            self.tally.not_sent[type(exc).__name__] += 1
            return
        self.tally.requests[route] += 1
        self.tally.statuses[(route, response.status_code)] += 1
        allowed = sorted(self.world.locations)
        for problem in admin_answer_problems(case.method, route, response, self.world.forbidden(), allowed, named):
            self._fail(route, response.status_code, problem, case)
        if 200 <= response.status_code < 300:
            self._learn(case, response)

    def _auth(self, auth: str) -> dict[str, str]:
        bearer = self.world.bearers[-1] if self.world.bearers else "no-bearer"
        return {
            "admin": {"Authorization": f"Bearer {ADMIN_TOKEN}"},
            "lower-case scheme": {"Authorization": f"bearer {ADMIN_TOKEN}"},
            "wrong": {"Authorization": "Bearer not-the-admin-token"},
            "recipient": {"Authorization": f"Bearer {bearer}"},
        }.get(auth, {})

    def _learn(self, case, response) -> None:
        """What a successful write tells: new links, registered locations; and the seed restored."""
        try:
            doc = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return
        if not isinstance(doc, dict):
            return
        link = doc.get("activation_url")
        if isinstance(link, str):
            self.world.activations.append(link.rsplit("/", 1)[1])
        if case.method == "POST" and case.path == ADMIN_PREFIX + "/tables":
            self.world.locations.add(doc["storage_location"])
            self.world.created_tables.append(doc["full_name"])
        if case.method in ("PATCH", "DELETE") or case.path.endswith("/rotate-token"):
            self.world.seed()

    def _fail(self, route: str, status: int | None, problem: str, case) -> None:
        try:
            request = case.as_curl_command(base_url=self.base_url)
        except Exception as exc:  # the finding counts even when its reproduction cannot be written out
            request = f"{case.method} {case.path} {case.path_parameters} {case.query} ({type(exc).__name__})"
        for secret in (ADMIN_TOKEN, *self.world.bearers):
            request = request.replace(secret, "<token>")
        self.tally.failures.append(Finding(route, status, problem, request))


class Steer:
    """Points one generated request at what exists (see the module's docstring)."""

    def __init__(self, world: AdminWorld, how: dict, pick: int) -> None:
        self.world = world
        self.how = how
        self.pick = pick
        self.spell = {"as is": str, "upper": str.upper, "title": str.title}[how["case"]]

    def real(self, kind: str) -> str:
        names = NAMES[kind] + (self.world.created_tables[-20:] if kind == "tables" else [])
        return names[self.pick % len(names)]

    def apply(self, case) -> None:
        path = case.path.removeprefix(ADMIN_PREFIX)
        kind = path.split("/")[1] if path.count("/") >= 1 else ""
        params = case.path_parameters
        if params is not None:
            if "name" in params and kind in NAMES:
                params["name"] = self.spell(self.real(kind))
            if "full_name" in params and kind in NAMES:
                params["full_name"] = self.spell(self.real(kind))
            if "activation_token" in params and self.world.activations:
                params["activation_token"] = self.world.activations[-1 - self.pick % len(self.world.activations)]
        if case.query is not None:
            self._query(case, path)
        if isinstance(case.body, dict):
            self._body(case.method, path, kind, case.body)

    def _query(self, case, path: str) -> None:
        catalog, schema = self.real("schemas").split(".")
        if "catalog_name" in case.query:
            case.query["catalog_name"] = self.spell(catalog)
        if "schema_name" in case.query:
            case.query["schema_name"] = self.spell(schema)
        page = self.how["page"]
        if page == "absent":
            case.query.pop("page_token", None)
        elif page == "real" and "page_token" in case.query and ADMIN_PREFIX + path in self.world.page_tokens:
            token, query = self.world.page_tokens[ADMIN_PREFIX + path]
            case.query.update(query, page_token=token)

    def _body(self, method: str, path: str, kind: str, body: dict) -> None:
        if method == "POST" and kind in NAMES and "name" in body:
            if self.how["create"] == "taken":
                body["name"] = self.spell(self.real(kind).split(".")[-1])
            elif self.how["create"] == "fresh":
                body["name"] = f"{kind[:-1]}_{self.pick}"
        if method == "PATCH" and "new_name" in body:
            self._rename(kind, body)
        if "catalog_name" in body or "schema_name" in body:
            catalog, schema = self.real("schemas").split(".")
            body.update(catalog_name=self.spell(catalog), **({"schema_name": schema} if "schema_name" in body else {}))
        if path == "/tables":
            self._table(body)
        if isinstance(body.get("updates"), list):
            for update in body["updates"]:
                if isinstance(update, dict) and isinstance(update.get("data_object"), dict):
                    self._data_object(update["data_object"])
        if isinstance(body.get("changes"), list):
            for change in body["changes"]:
                if isinstance(change, dict):
                    self._change(change)
        self._inject(body)

    def _inject(self, body: dict) -> None:
        """One value of the body made what no database stores: text with a NUL or an unpaired
        surrogate, or a number beyond 64 bits."""
        how = self.how["inject"]
        spots = list(_spots(body))
        if how == "a number beyond 64 bits":
            spots = [(c, k) for c, k in spots if isinstance(c[k], int) and not isinstance(c[k], bool)]
        else:
            spots = [(c, k) for c, k in spots if isinstance(c[k], str)]
        if how == "nothing" or not spots:
            return
        container, key = spots[self.pick % len(spots)]
        container[key] = {"NUL": f"{container[key]}\x00", "unpaired surrogate": f"\ud800{container[key]}"}.get(
            how, 2**63 + self.pick
        )

    def _rename(self, kind: str, body: dict) -> None:
        how = self.how["rename"]
        if how == "absent":
            del body["new_name"]
        elif how == "fresh":
            body["new_name"] = f"renamed_{self.pick}"
        elif how == "taken" and kind in NAMES:
            body["new_name"] = self.spell(self.real(kind).split(".")[-1])

    def _table(self, body: dict) -> None:
        if self.how["kinds"] == "valid":
            body.update(table_type="EXTERNAL", data_source_format="DELTA")
        root = self.world.root
        folder = sorted(COPIES)[self.pick % len(COPIES)]
        where = {
            "spare": root / "spare",
            "registered": root / folder,
            "root": root,
            "not delta": root / "not-delta",
            "log": root / folder / "_delta_log",
            "outside": TABLES / COPIES[folder],
            "traversal": f"{root}/../{root.name}/{folder}",
            "file url": (root / folder).as_uri(),
            "remote": "s3://deltaport-fuzz/tables/t",  # outside the local root: refused, never fetched
            "relative": f"{root.name}/{folder}",
        }.get(self.how["location"])
        if where is not None:
            body["storage_location"] = str(where)
        if self.how["location"] == "remote":
            body["catalog_name"] = "main"

    def _data_object(self, obj: dict) -> None:
        if self.how["kinds"] == "valid":
            obj["data_object_type"] = "SCHEMA" if self.pick % 4 == 0 else "TABLE"
        kind = "schemas" if obj.get("data_object_type") == "SCHEMA" else "tables"
        obj["name"] = self.spell(self.real(kind))

    def _change(self, change: dict) -> None:
        change["principal"] = self.spell(self.real("recipients"))
        if self.how["privileges"] == "select":
            for key in ("add", "remove"):
                if isinstance(change.get(key), list):
                    change[key] = ["SELECT"] if (self.pick + len(key)) % 2 else []


def _spots(value):
    """(container, key) of every value inside a JSON body."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in list(items):
        yield value, key
        yield from _spots(item)
