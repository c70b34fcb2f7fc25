"""What one recipient can see on the recipients' port: every route of the app's route table (so a
route added later is swept too), with every method, known and unknown names, answered with no
other recipient's name, no share it lacks, no table location and no token in a body or header.
A share it lacks answers exactly as one that does not exist."""

from __future__ import annotations

import re
import shutil

import httpx
import pytest
from conftest import TABLES
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.catalog.import_served import import_served
from deltaport.catalog.store import CatalogDB
from deltaport.server import create_app, parse_config

ALICE = "view-token-alice-2b7d"
BOB = "view-token-bob-f31c"
ADMIN = "view-admin-token-8e0a"
METRICS = "view-metrics-token-4c19"
secrets_used.add(ALICE, BOB, ADMIN, METRICS, label="a recipient-view test's token")
OTHER = "bobrecipient-k2"
HIDDEN_SHARE, HIDDEN_TABLE = "hiddenshare-q7", "hiddentable-z3"
PENDING = "carolpending-x5"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("secret-location-w9")
    mine, theirs = root / "mine", root / "theirs"
    shutil.copytree(TABLES / "basic_partitioned", mine)
    shutil.copytree(TABLES / "cdf-table", theirs)
    shares = {
        "version": 1,
        "shares": [
            {"name": "corpus", "schemas": [{"name": "default", "tables": [{"name": "t", "location": str(mine)}]}]},
            {
                "name": HIDDEN_SHARE,
                "schemas": [{"name": "h", "tables": [{"name": HIDDEN_TABLE, "location": str(theirs)}]}],
            },
        ],
        "recipients": [
            {"name": "alice", "tokens": [ALICE], "shares": ["corpus"]},
            {"name": OTHER, "tokens": [BOB], "shares": [HIDDEN_SHARE]},
        ],
    }
    served = parse_config(shares)
    catalog = CatalogDB(f"sqlite:///{root / 'catalog.db'}")
    import_served(catalog, served.shares, served.recipients)
    _, activation = catalog.create_recipient(PENDING)
    secrets_used.add(activation, label="a pending activation token")
    config = {"version": 1, "catalog": str(root / "catalog.db"), "adminTokens": [ADMIN], "metricsToken": METRICS}
    app = create_app(parse_config(config, base=root), catalog=catalog)
    server = RunningServer(app)
    query = f"{server.url}/delta-sharing/shares/{HIDDEN_SHARE}/schemas/h/tables/{HIDDEN_TABLE}/query"
    assert httpx.post(query, json={}, headers={"Authorization": f"Bearer {BOB}"}).status_code == 200  # in the metrics
    forbidden = [OTHER, PENDING, str(root), root.name, BOB, ADMIN, METRICS, activation, activation[4:]]
    yield app, server, forbidden
    server.stop()
    catalog.close()


VALUES = {
    "share": ["corpus", HIDDEN_SHARE, "nosuchshare"],
    "schema": ["default", "h", "nosuchschema"],
    "table": ["t", HIDDEN_TABLE, "nosuchtable"],
    "activation_token": ["dpa_" + "A" * 43, "not-a-token"],
    "key": ["0" * 24],
    "path": ["part-0.parquet", "../catalog.db"],
}


def _paths(template: str) -> list[str]:
    paths = [template]
    for name in re.findall(r"{(\w+)(?::\w+)?}", template):
        pattern = re.compile(r"{" + name + r"(?::\w+)?}")
        paths = [pattern.sub(value, p, count=1) for p in paths for value in VALUES.get(name, ["x"])]
    return paths


def _requests(app) -> list[tuple[str, str]]:
    out = []
    for route in app.routes:
        template = getattr(route, "path", None)
        if template is None:
            continue
        for path in _paths(template):
            out.extend((method, path) for method in METHODS)
    assert len(out) > 200 and any("/query" in p for _, p in out) and any("activate" in p for _, p in out)
    return [*out, ("GET", "/no/such/route"), ("GET", "/delta-sharing/no/such/route")]


def test_one_recipient_sees_nothing_of_others_on_any_route(world):
    app, server, forbidden = world
    problems = []
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30) as client:
        for method, path in _requests(app):
            body = {} if method in ("POST", "PUT", "PATCH") else None
            answer = client.request(method, path, json=body)
            seen = answer.text + "\n" + "\n".join(f"{k}: {v}" for k, v in answer.headers.items())
            hidden = [HIDDEN_SHARE, HIDDEN_TABLE, "theirs"]
            for word in [*forbidden, *(w for w in hidden if w not in path)]:
                if word in seen:
                    problems.append(f"{method} {path} ({answer.status_code}) shows {word!r}")
            if answer.status_code >= 500:
                problems.append(f"{method} {path} answered {answer.status_code}")
            if HIDDEN_SHARE in path:  # a share alice lacks answers as one that does not exist
                twin = client.request(method, path.replace(HIDDEN_SHARE, "nosuchshare"), json=body)
                if (answer.status_code, answer.text.replace(HIDDEN_SHARE, "?")) != (
                    twin.status_code,
                    twin.text.replace("nosuchshare", "?"),
                ):
                    problems.append(f"{method} {path} tells the hidden share from a missing one")
    assert problems == [], "\n".join(problems)
