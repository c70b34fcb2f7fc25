"""Storage locations as values: one normal form, and the one rule for "inside".

Two spellings of one directory compare equal once normalised: the scheme by family (``s3a://`` and
``s3n://`` are ``s3://``; ``abfss://``, ``wasbs://`` are their plain forms), the authority in lower
case, the path percent-decoded with empty and ``.`` segments dropped and no trailing ``/``. A
``..`` segment is refused, never resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = ["Location", "LocationError"]

_FAMILY = {"s3a": "s3", "s3n": "s3", "abfss": "abfs", "wasbs": "wasb", "gcs": "gs"}


class LocationError(ValueError):
    """A location that is not a URL of a directory (the message names the rule)."""


@dataclass(frozen=True)
class Location:
    scheme: str
    authority: str
    path: str  # "" for the root of the bucket/container, else "a/b/c"

    @classmethod
    def parse(cls, url: str) -> Location:
        parts = urlsplit(url)
        if not parts.scheme or not parts.netloc or len(parts.scheme) == 1:
            raise LocationError(f"'{url}' is not a storage URL: give scheme://bucket/path, e.g. s3://bucket/table")
        if parts.query or parts.fragment:
            raise LocationError(f"'{url}' has a query or fragment: give the directory's URL only")
        segments = []
        for raw in parts.path.split("/"):
            segment = unquote(raw)
            if segment in ("", "."):
                continue
            if segment == ".." or "/" in segment or "\\" in segment:
                raise LocationError(f"'{url}' has a '..' or an encoded separator in its path: give the path plainly")
            segments.append(segment)
        scheme = parts.scheme.lower()
        return cls(_FAMILY.get(scheme, scheme), parts.netloc.lower(), "/".join(segments))

    def url(self) -> str:
        return f"{self.scheme}://{self.authority}/{self.path}" if self.path else f"{self.scheme}://{self.authority}"

    def within(self, root: Location) -> bool:
        """Whether this is ``root`` or a directory under it (``…/table1x`` is not under ``…/table1``)."""
        if (self.scheme, self.authority) != (root.scheme, root.authority):
            return False
        return not root.path or self.path == root.path or self.path.startswith(root.path + "/")
