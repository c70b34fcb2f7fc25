"""The storage options named when a key is refused are obstore's own: the lists kept in
storage/object_store.py stay equal to the installed obstore's S3Config, AzureConfig and GCSConfig
(read from its type stubs, which the wheel ships)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from deltaport.storage.object_store import STORE_KEYS

STUBS = {"s3": ("_aws.pyi", "S3Config"), "azure": ("_azure.pyi", "AzureConfig"), "gcs": ("_gcs.pyi", "GCSConfig")}


def _declared(stub: str, name: str) -> list[str]:
    spec = importlib.util.find_spec("obstore")
    assert spec is not None and spec.submodule_search_locations
    tree = ast.parse((Path(next(iter(spec.submodule_search_locations))) / "_store" / stub).read_text())
    (config,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return [n.target.id for n in config.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


@pytest.mark.parametrize("kind", sorted(STUBS))
def test_the_named_store_options_are_the_installed_obstores(kind):
    assert sorted(STORE_KEYS[kind]) == sorted(_declared(*STUBS[kind]))


@pytest.mark.parametrize(
    ("location", "key"),
    [
        ("s3://bucket/table", "aws_role_arn"),
        ("s3://bucket/table", "AWS_STS_ENDPOINT"),
        ("s3://bucket/table", "aws_external_id"),
        ("az://container/table", "azure_sas_scope"),
        ("gs://bucket/table", "gcs_sts_endpoint"),
    ],
)
def test_the_vending_options_are_accepted_and_never_handed_to_the_store(location, key):
    """obstore reads ``aws_role_arn`` and ``aws_sts_endpoint`` as its own (web identity) settings and
    refuses the others: the options only vending reads stay out of the store it opens."""
    from deltaport.storage import VENDING_OPTIONS, check_storage_options, store_for

    assert key.lower() in VENDING_OPTIONS
    options = {key: "http://127.0.0.1:9" if "endpoint" in key else "x"}
    if location.startswith("az"):
        options["account_name"] = "account"
    check_storage_options(location, options)
    store = store_for(location, options)
    assert key not in store.given_options  # type: ignore[attr-defined]
