"""Delta schemas as Spark and Arrow types."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaport.errors import UnsupportedOperation
from deltaport.spark.types import arrow_schema, delta_to_spark, with_cdf_columns


def schema(*fields):
    return json.dumps({"type": "struct", "fields": list(fields)})


def field(name, t, nullable=True, metadata=None):
    return {"name": name, "type": t, "nullable": nullable, "metadata": metadata or {}}


def test_primitives_decimals_and_nested_types():
    spark = delta_to_spark(
        schema(
            field("a", "decimal(38,18)"),
            field("b", "timestamp_ntz", False),
            field("v", "void"),
            field(
                "n",
                {
                    "type": "array",
                    "elementType": {
                        "type": "map",
                        "keyType": "string",
                        "valueType": "long",
                        "valueContainsNull": False,
                    },
                    "containsNull": False,
                },
            ),
            field("s", {"type": "struct", "fields": [field("x", "integer", False)]}),
        )
    )
    assert spark == StructType(
        [
            StructField("a", DecimalType(38, 18)),
            StructField("b", TimestampNTZType(), False),
            StructField("v", NullType()),
            StructField("n", ArrayType(MapType(StringType(), LongType(), False), False)),
            StructField("s", StructType([StructField("x", IntegerType(), False)])),
        ]
    )
    arrow = arrow_schema(spark)
    assert arrow.field("a").type == pa.decimal128(38, 18)
    assert arrow.field("b").type == pa.timestamp("us") and not arrow.field("b").nullable
    assert arrow.field("n").type == pa.list_(
        pa.field(
            "element",
            pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64(), nullable=False)),
            nullable=False,
        )
    )


def test_column_mapping_metadata_is_dropped_and_comments_kept():
    spark = delta_to_spark(
        schema(
            field(
                "id",
                "long",
                metadata={"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1", "comment": "key"},
            )
        )
    )
    assert spark.fields[0].name == "id" and spark.fields[0].metadata == {"comment": "key"}


def test_change_feed_columns():
    spark = with_cdf_columns(delta_to_spark(schema(field("id", "long"))))
    assert spark.names == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    assert spark["_commit_timestamp"].dataType == TimestampType()
    assert arrow_schema(spark).field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")


def test_unknown_types_are_refused():
    with pytest.raises(UnsupportedOperation, match="interval"):
        delta_to_spark(schema(field("x", "interval")))
