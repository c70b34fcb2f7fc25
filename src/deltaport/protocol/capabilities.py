"""The ``delta-sharing-capabilities`` header: what the client can read, what the server chose."""

from __future__ import annotations

from dataclasses import dataclass

HEADER = "delta-sharing-capabilities"
PARQUET = "parquet"
DELTA = "delta"


@dataclass(frozen=True)
class Capabilities:
    response_formats: tuple[str, ...] = (PARQUET,)
    reader_features: frozenset[str] = frozenset()
    include_end_stream_action: bool = False
    async_query: bool = False
    explicit: bool = False  # the header was sent at all

    @classmethod
    def parse(cls, value: str | None) -> Capabilities:
        """Parse leniently, as the reference does: lower-case, ';'-separated key=value parts."""
        if value is None:
            return cls()
        formats: tuple[str, ...] = (PARQUET,)
        features: frozenset[str] = frozenset()
        end_stream = async_query = False
        for part in value.lower().split(";"):
            kv = part.split("=")
            if len(kv) != 2:
                continue
            key, val = kv[0].strip(), kv[1].strip()
            if key == "responseformat":
                listed = tuple(f.strip() for f in val.split(",") if f.strip())
                formats = listed or formats
            elif key == "readerfeatures":
                features = frozenset(f.strip() for f in val.split(",") if f.strip())
            elif key == "includeendstreamaction":
                end_stream = val == "true"
            elif key == "asyncquery":
                async_query = val == "true"
        return cls(formats, features, end_stream, async_query, True)

    def has_reader_feature(self, name: str) -> bool:
        return name.lower() in self.reader_features

    def response_header(self, chosen: str) -> str:
        out = f"responseformat={chosen}"
        if self.include_end_stream_action:
            out += ";includeendstreamaction=true"
        return out
