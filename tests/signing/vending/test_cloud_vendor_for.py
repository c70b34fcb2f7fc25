"""The dispatcher: one vendor per cloud, and a message naming what to do for a store none vends for."""

from __future__ import annotations

import pytest

from deltaport.errors import UnsupportedOperation
from deltaport.signing.vending import cloud_vendor_for
from deltaport.signing.vending.azure_sas import AzureSasVendor
from deltaport.signing.vending.gcs_boundary import GcsBoundaryVendor
from deltaport.signing.vending.s3_sts import S3StsVendor
from deltaport.storage.locations import Location


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("s3://b/t", S3StsVendor),
        ("s3a://b/t", S3StsVendor),
        ("az://c/t", AzureSasVendor),
        ("abfss://c@acct.dfs.core.windows.net/t", AzureSasVendor),
        ("wasbs://c@acct.blob.core.windows.net/t", AzureSasVendor),
        ("gs://b/t", GcsBoundaryVendor),
    ],
)
def test_each_cloud_has_its_vendor(url, kind):
    assert isinstance(cloud_vendor_for(Location.parse(url), {}), kind)


def test_the_gcs_sts_endpoint_comes_from_the_options():
    vendor = cloud_vendor_for(Location.parse("gs://b/t"), {"GCS_STS_ENDPOINT": "http://127.0.0.1:1/v1/token"})
    assert isinstance(vendor, GcsBoundaryVendor) and vendor.sts_endpoint == "http://127.0.0.1:1/v1/token"


@pytest.mark.parametrize("url", ["https://example.com/t", "hdfs://nn/t", "memory://x/t"])
def test_a_store_no_cloud_vends_for_is_refused_naming_url_access(url):
    with pytest.raises(UnsupportedOperation) as refused:
        cloud_vendor_for(Location.parse(url), {})
    assert refused.value.http_status == 400
    assert "url access" in refused.value.message and "s3://" in refused.value.message


def test_a_scope_s_repr_shows_none_of_its_storage_options():
    from deltaport.signing.vending import CredentialScope

    scope = CredentialScope("s3://b/t", {"aws_secret_access_key": "secret-in-options"})
    assert "secret-in-options" not in repr(scope) and "s3://b/t" in repr(scope)
