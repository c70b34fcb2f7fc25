"""Schemathesis over a real deltaport server on loopback: the server, the generated requests, and
the properties every answer must have. Used by tests/server/test_fuzz.py (bounded, fixed seed) and
benchmarks/fuzz_server.py (10,000+ requests).

Requests come from the server's own ``/openapi.json``, every operation in both generation modes
(positive: inputs the document allows; negative: inputs it does not). Each generated request is
then steered a little, so the fuzzer gets past the outer checks: most carry the recipient's bearer
token (some none, a wrong one, or another recipient's), most table requests name a table that
exists (in any letter case), and file URLs are sent as generated, as the server issued them, with
their signature tampered with, or with a generated path signed with the server's own key (so a
hostile path reaches the path check, not just the signature check).

Properties of every answer: no 5xx; every 4xx is the protocol's JSON error (exactly ``errorCode``
and ``message``, both strings); no body or header holds the bearer tokens, the file-URL secret,
where the tables are stored, or a traceback; and a 2xx JSON or NDJSON body parses.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import hypothesis
import orjson
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from deltaport.server import create_app, parse_config
from deltaport.signing.sigv4 import SigV4Presigner

TABLES = (
    Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")).resolve() / "delta-tables"
)
FUZZ_TABLES = {
    "partitioned": "basic_partitioned",
    "cdf": "cdf-table",
    "dv": "table-with-dv-small",
    "cm": "cdf-column-mapping-name-mode",
    "checkpointed": "external-table-different-nullability",
}
TOKEN = "fuzz-recipient-token-3b9d0c7e"
OTHER_TOKEN = "fuzz-other-recipient-token-51af"
FILE_SECRET = b"fuzz-file-url-secret-6f1e2d9a8c7b"
TOKEN_SECRET = "fuzz-page-token-secret-0a4c"
PREFIX = "/delta-sharing"
TRACEBACK_MARKS = ("Traceback", 'File "', '.py", line')
_ALL_FEATURES = "responseformat=delta;readerfeatures=deletionvectors,columnmapping,timestampntz,v2checkpoint"


def fuzz_config() -> dict:
    """Share ``fuzz.default`` (five corpus tables, history shared and read by URL or directory, plus one
    without history, read by URL only) for recipient
    ``alice``; share ``other.s`` for ``bob``."""
    tables = [
        {
            "name": name,
            "location": str(TABLES / path),
            "id": f"id-{name}",
            "historyShared": True,
            "accessModes": ["url", "dir"],
        }
        for name, path in FUZZ_TABLES.items()
    ]
    tables.append({"name": "nohistory", "location": str(TABLES / "basic_partitioned"), "id": "id-nohistory"})
    return {
        "version": 1,
        "tokenSecret": TOKEN_SECRET,
        "shares": [
            {"name": "fuzz", "schemas": [{"name": "default", "tables": tables}]},
            {
                "name": "other",
                "schemas": [{"name": "s", "tables": [{"name": "t", "location": str(TABLES / "cdf-table")}]}],
            },
        ],
        "recipients": [
            {"name": "alice", "tokens": [TOKEN], "shares": ["fuzz"]},
            {"name": "bob", "tokens": [OTHER_TOKEN], "shares": ["other"]},
        ],
        "preSignedUrlTimeoutSeconds": 900,
        "asyncQueryThresholdMs": 0,  # every asyncquery=true query answers a queryId the fuzzer can poll
    }


def fuzz_app():
    return create_app(parse_config(fuzz_config()), file_secret=FILE_SECRET)


def forbidden_texts() -> dict[str, str]:
    """What no answer may hold, by a label safe to print."""
    out = {
        "the bearer token": TOKEN,
        "another recipient's token": OTHER_TOKEN,
        "the file-URL secret": FILE_SECRET.decode(),
        "the file-URL secret (hex)": FILE_SECRET.hex(),
        "the page-token secret": TOKEN_SECRET,
        "where the tables are stored": str(TABLES),
    }
    for mark in TRACEBACK_MARKS:
        out[f"a traceback ({mark!r})"] = mark
    return out


@dataclasses.dataclass
class FileUrls:
    """Real file URLs the server issued, and what signing more of them takes."""

    urls: list[str]
    table_keys: list[str]
    presigner: SigV4Presigner

    @classmethod
    def collect(cls, base_url: str) -> FileUrls:
        urls = []
        with requests.Session() as s:
            for table in FUZZ_TABLES:
                r = s.post(
                    f"{base_url}{PREFIX}/shares/fuzz/schemas/default/tables/{table}/query",
                    json={},
                    headers={"Authorization": f"Bearer {TOKEN}", "delta-sharing-capabilities": _ALL_FEATURES},
                    timeout=60,
                )
                r.raise_for_status()
                for line in r.content.splitlines()[2:]:
                    file = orjson.loads(line).get("file", {})
                    url = file.get("deltaSingleAction", {}).get("add", {}).get("path")
                    if url:
                        urls.append(url)
        assert urls, "no table answered with a file"
        keys = sorted({urlsplit(u).path.split("/files/", 1)[1].split("/", 1)[0] for u in urls})
        credential = dict(parse_qsl(urlsplit(urls[0]).query))["X-Amz-Credential"]
        presigner = SigV4Presigner(base_url, credential.split("/", 1)[0], FILE_SECRET, region="us-east-1", service="s3")
        return cls(urls, keys, presigner)

    def sign(self, encoded_path: str) -> str:
        """A URL for ``encoded_path`` (sent as is) signed with the server's own key."""
        url, _ = self.presigner.presign_encoded(encoded_path, expires_in=600)
        return url


def run_examples(operation, mode, examples: int, seed: int, steer, send) -> None:
    """At most ``examples`` requests of ``operation`` in generation ``mode``, reproducibly from
    ``seed``, each handed to ``send(case, how, pick)`` with ``how`` drawn from ``steer``."""

    @hypothesis.seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode), how=steer, pick=st.integers(0, 10**6))
    def one(case, how, pick):
        send(case, how, pick)

    try:
        one()
    except hypothesis.errors.Unsatisfiable:  # nothing to make invalid (an operation without inputs)
        pass


@dataclasses.dataclass
class Finding:
    route: str
    status: int | None
    problem: str
    request: str

    def __str__(self) -> str:
        return f"{self.route} -> {self.status}: {self.problem}\n    {self.request}"


@dataclasses.dataclass
class Tally:
    """What a fuzzing run sent and saw."""

    requests: Counter[str] = dataclasses.field(default_factory=Counter)
    statuses: Counter[tuple[str, int]] = dataclasses.field(default_factory=Counter)
    not_sent: Counter[str] = dataclasses.field(default_factory=Counter)
    failures: list[Finding] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def problems_seen(self) -> Counter[str]:
        return Counter(f"{f.route}: {f.problem}" for f in self.failures)

    def report(self) -> str:
        lines = [f"{self.total} requests in {self.seconds:.1f} s ({self.total / max(self.seconds, 1e-9):.0f}/s)"]
        for route, n in sorted(self.requests.items()):
            seen = ", ".join(f"{s}x{c}" for (r, s), c in sorted(self.statuses.items()) if r == route)
            lines.append(f"  {n:6d}  {route}  [{seen}]")
        if self.not_sent:
            lines.append("not sent (the HTTP client refused the generated request): " + str(dict(self.not_sent)))
        lines.append(f"failures: {len(self.failures)}")
        for problem, n in self.problems_seen().most_common():
            lines.append(f"  {n:6d}  {problem}")
        return "\n".join(lines)


PROTOCOL_ERROR = ("errorCode", "message")


def answer_problems(method: str, route: str, response, forbidden: dict[str, str]) -> list[str]:
    """What is wrong with one answer (empty when nothing is)."""
    status = response.status_code
    headers = lowered_headers(response)
    body = response.content
    problems = []
    if status >= 500:
        problems.append(f"server error {status}")
    if 400 <= status < 500 and method != "HEAD":
        problems += error_shape(headers, body)
    if 200 <= status < 300 and method != "HEAD":
        problems += _well_formed(headers, body)
    text = "\n".join(f"{k}: {v}" for k, v in headers.items())
    if not (200 <= status < 300 and "/files/" in route):  # a file's own bytes are the table's data
        text += "\n" + body.decode("latin-1")
    problems += [f"leaks {label}" for label, secret in forbidden.items() if secret in text]
    return problems


def lowered_headers(response) -> dict[str, str]:
    """A response's headers by lower-case name (a repeated header's values joined)."""
    return {k.lower(): ", ".join(v) if isinstance(v, list) else v for k, v in response.headers.items()}


def error_shape(headers: dict[str, str], body: bytes, keys: tuple[str, str] = PROTOCOL_ERROR) -> list[str]:
    """What is wrong with an error answer: JSON, exactly ``keys``, each a non-empty string."""
    if not headers.get("content-type", "").startswith("application/json"):
        return [f"error is not JSON ({headers.get('content-type')!r})"]
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ["error body does not parse as JSON"]
    if not isinstance(doc, dict) or set(doc) != set(keys):
        return [f"error body is not exactly {' and '.join(keys)}: {sorted(doc) if isinstance(doc, dict) else doc}"]
    if not all(isinstance(doc[k], str) for k in keys):
        return [f"{' or '.join(keys)} is not a string"]
    if not all(doc[k] for k in keys):
        return [f"{' or '.join(keys)} is not a non-empty string"]
    return []


def _well_formed(headers: dict[str, str], body: bytes) -> list[str]:
    kind = headers.get("content-type", "")
    try:
        if kind.startswith("application/json"):
            orjson.loads(body)
        elif kind.startswith("application/x-ndjson"):
            for line in body.splitlines():
                orjson.loads(line)
    except orjson.JSONDecodeError:
        return [f"a {kind} answer does not parse"]
    return []


#: How a request is steered after generation (drawn with it, so a run is reproducible).
_AUTH = st.sampled_from(["valid"] * 16 + ["none", "none", "wrong", "other recipient"])
_NAME = st.sampled_from(["real"] * 3 + ["generated"])
_CASE = st.sampled_from(["as is", "upper", "title"])
_FILE = st.sampled_from(["generated", "issued", "tampered", "signed path", "signed path"])


def _tokens(auth: str) -> dict[str, str]:
    return {
        "valid": {"Authorization": f"Bearer {TOKEN}"},
        "wrong": {"Authorization": "Bearer not-the-token"},
        "other recipient": {"Authorization": f"Bearer {OTHER_TOKEN}"},
    }.get(auth, {})


class Fuzzer:
    """Runs the operations of ``schema`` against ``base_url``; answers are judged by
    :func:`answer_problems`, and what was sent and seen goes to ``tally``."""

    def __init__(self, schema, base_url: str, files: FileUrls, tally: Tally) -> None:
        self.schema = schema
        self.base_url = base_url
        self.files = files
        self.tally = tally
        self.forbidden = forbidden_texts()
        self.session = requests.Session()
        # the change-data-feed tables first (drawn most): they answer the most kinds of request
        tables = ["cdf", "cm", *FUZZ_TABLES, "nohistory"]
        self.table_names = [("fuzz", "default", t) for t in tables] + [("other", "s", "t")]

    def run(self, examples: int, seed: int, modes=(GenerationMode.POSITIVE, GenerationMode.NEGATIVE)) -> None:
        """``examples`` generated requests (at most) per operation and mode, reproducibly from ``seed``."""
        start = time.perf_counter()
        try:
            for index, result in enumerate(self.schema.get_all_operations()):
                operation = result.ok()
                for mode in modes:
                    self._run_operation(operation, mode, examples, seed * 1000 + index * 2 + (mode == modes[0]))
        finally:
            self.tally.seconds += time.perf_counter() - start

    def _run_operation(self, operation, mode, examples: int, seed: int) -> None:
        steer = st.fixed_dictionaries(
            {
                "auth": _AUTH,
                "name": _NAME,
                "case": _CASE,
                "table": st.sampled_from(self.table_names),
                "file": _FILE,
                "trim": st.sampled_from([True, False]),
                "start": st.integers(0, 3),
            }
        )

        run_examples(operation, mode, examples, seed, steer, self.send)

    def send(self, case, how: dict, pick: int) -> None:
        route = f"{case.method} {case.path}"
        case.headers.pop("Authorization", None)
        case.headers.update(_tokens(how["auth"]))
        if how["name"] == "real":
            self._name_a_table(case, how)
        if how["trim"]:
            _trim(case, how["start"])
        url = None
        try:
            if "/files/" in case.path and how["file"] != "generated":
                url = self._file_url(case, how["file"], pick)
            if url is None:
                response = case.call(base_url=self.base_url, session=self.session, timeout=60)
            else:
                raw = self.session.request(case.method, url, headers=dict(case.headers), timeout=60)
                response = schemathesis.Response.from_requests(raw, verify=True)
        except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            self._fail(route, None, f"connection failed: {type(exc).__name__}", case, url)
            return
        except (requests.exceptions.RequestException, ValueError, UnicodeError) as exc:
            self.tally.not_sent[type(exc).__name__] += 1
            return
        self.tally.requests[route] += 1
        self.tally.statuses[(route, response.status_code)] += 1
        for problem in answer_problems(case.method, route, response, self.forbidden):
            self._fail(route, response.status_code, problem, case, url)

    def _name_a_table(self, case, how: dict) -> None:
        share, schema, table = how["table"]
        spell = {"as is": str, "upper": str.upper, "title": str.title}[how["case"]]
        for key, value in (("share", share), ("schema", schema), ("table", table)):
            if key in case.path_parameters:
                case.path_parameters[key] = spell(value)
        if "query_id" in case.path_parameters:
            case.path_parameters["query_id"] = self._query_id(share, schema, table, case.headers)

    def _query_id(self, share: str, schema: str, table: str, headers) -> str:
        """A real queryId of this table, asked for as the request's recipient ("x" when it has none)."""
        url = f"{self.base_url}{PREFIX}/shares/{share}/schemas/{schema}/tables/{table}/query"
        asked = {**dict(headers), "delta-sharing-capabilities": "asyncquery=true"}
        answer = self.session.post(url, json={}, headers=asked, timeout=60)
        line = answer.content.split(b"\n", 1)[0] if answer.status_code == 200 else b"{}"
        return orjson.loads(line).get("queryStatus", {}).get("queryId") or "x"

    def _file_url(self, case, how: str, pick: int) -> str:
        issued = self.files.urls[pick % len(self.files.urls)]
        if how == "issued":
            return issued
        if how == "tampered":  # one query parameter replaced by the generated one
            parts = urlsplit(issued)
            query = dict(parse_qsl(parts.query))
            names = sorted(query)
            name = names[pick % len(names)]
            query[name] = str(case.query.get(name, "x"))
            return parts._replace(query="&".join(f"{k}={requests.utils.quote(v)}" for k, v in query.items())).geturl()
        # a generated path, signed over exactly what is sent, under a real table key
        key = self.files.table_keys[pick % len(self.files.table_keys)]
        case.path_parameters["key"] = key
        prepared = requests.Request(case.method, case.as_transport_kwargs(base_url=self.base_url)["url"]).prepare()
        return self.files.sign(urlsplit(prepared.url).path)

    def _fail(self, route: str, status: int | None, problem: str, case, url: str | None) -> None:
        try:
            request = f"{case.method} {url}" if url else case.as_curl_command(base_url=self.base_url)
        except Exception as exc:  # the finding counts even when its reproduction cannot be written out
            # not repr(case): it holds the Authorization header
            request = f"{case.method} {case.path} {case.path_parameters} {case.query} ({type(exc).__name__})"
        self.tally.failures.append(Finding(route, status, problem, request))


def _trim(case, start: int) -> None:
    """Drop what makes a generated request fail early: alternatives given together, generated page
    and refresh tokens (never valid), and a change feed without a start (``start`` is given)."""
    for where in (case.query, case.body if isinstance(case.body, dict) else None):
        if where is None:
            continue
        where.pop("pageToken", None)
        where.pop("refreshToken", None)
        starts = [k for k in ("startingVersion", "startingTimestamp", "version", "timestamp") if k in where]
        for extra in starts[1:]:
            del where[extra]
        if "endingVersion" in where:
            where.pop("endingTimestamp", None)
    if case.path.endswith("/changes") and not {"startingVersion", "startingTimestamp"} & set(case.query):
        case.query["startingVersion"] = start


def load_schema(base_url: str):
    """The server's own API document, as schemathesis reads it. The bearer token is the fuzzer's
    to set (see ``_AUTH``), so schemathesis generates no security parameters of its own."""
    config = schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}})
    return schemathesis.openapi.from_url(base_url + "/openapi.json", config=config, timeout=30)
