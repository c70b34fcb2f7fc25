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
