"""Checks on the files themselves: what a recipient reads through the URLs the server hands out.

A file URL is read with no bearer token (it must carry its own authorisation), and is never printed.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq

from deltaport.conformance.shapes import Answer, FileLine
from deltaport.conformance.wire import Failed, Skipped, Wire, expect

#: Files bigger than this are not downloaded by the checks.
MAX_FILE_BYTES = 64 << 20
#: At most this many change files (and bytes) are read to check their ``_change_type``.
MAX_CHANGE_FILES = 16
MAX_CHANGE_BYTES = 128 << 20
CHANGE_TYPES = frozenset({"insert", "update_preimage", "update_postimage", "delete"})
#: Query parameters that carry a presigned URL's signature (S3 and GCS V4, Azure SAS).
_SIGNATURES = ("x-amz-signature", "x-goog-signature", "sig", "signature")


def smallest(answer: Answer) -> FileLine:
    """The answer's smallest file, to read through its URL."""
    if not answer.files:
        raise Skipped("the table chosen has no file")
    file = min(answer.files, key=lambda f: f.size)
    if file.size > MAX_FILE_BYTES:
        raise Skipped(f"the smallest file is {file.size} bytes, over the {MAX_FILE_BYTES >> 20} MiB the kit reads")
    return file


def _read(wire: Wire, file: FileLine, what: str) -> bytes:
    resp = wire.fetch(file.url)
    expect(resp.status_code == 200, f"HTTP 200 for a GET on {what}'s URL", f"HTTP {resp.status_code}")
    expect(
        len(resp.content) == file.size,
        f"{file.size} bytes (the line's size) from {what}'s URL",
        f"{len(resp.content)} bytes",
    )
    return resp.content


def check_get(wire: Wire, file: FileLine) -> str:
    data = _read(wire, file, "a file")
    expect(
        data[:4] == b"PAR1" and data[-4:] == b"PAR1", "a parquet file (PAR1 at both ends)", repr(data[:4] + data[-4:])
    )
    return f"{file.size} bytes"


def check_range(wire: Wire, file: FileLine) -> None:
    expect(file.size >= 12, "a parquet file of at least 12 bytes", f"size {file.size}")
    for asked, want_range, head in (
        ("bytes=0-3", f"bytes 0-3/{file.size}", True),
        (f"bytes={file.size - 8}-", f"bytes {file.size - 8}-{file.size - 1}/{file.size}", False),
    ):
        resp = wire.fetch(file.url, {"Range": asked})
        expect(resp.status_code == 206, f"HTTP 206 for a file URL with Range: {asked}", f"HTTP {resp.status_code}")
        got = resp.headers.get("content-range", "")
        expect(
            got.replace(" ", "") == want_range.replace(" ", ""),
            f"Content-Range: {want_range}",
            got or "no Content-Range",
        )
        body = resp.content
        ok = body == b"PAR1" if head else (len(body) == 8 and body.endswith(b"PAR1"))
        expect(ok, f"the asked bytes of the parquet file for Range: {asked}", f"{len(body)} bytes {body[-4:]!r}")


def _flip(text: str) -> str:
    """``text`` with its first letter or digit changed."""
    for i, c in enumerate(text):
        if c.isalnum():
            return text[:i] + ("b" if c == "a" else "a") + text[i + 1 :]
    return text + "a"


def altered_urls(url: str) -> list[tuple[str, str]]:
    """(what was altered, URL) pairs: the signature (or the last query parameter), and the path."""
    parts = urlsplit(url)
    out = []
    if parts.query:
        pairs = parts.query.split("&")
        names = [p.partition("=")[0].lower() for p in pairs]
        at = next((i for i, n in enumerate(names) if n in _SIGNATURES), len(pairs) - 1)
        name, _, value = pairs[at].partition("=")
        pairs[at] = f"{name}={_flip(value)}"
        out.append((f"query parameter {name}", urlunsplit(parts._replace(query="&".join(pairs)))))
    head, _, last = parts.path.rpartition("/")
    out.append(("path", urlunsplit(parts._replace(path=f"{head}/{_flip(last)}"))))
    return out


def check_altered(wire: Wire, file: FileLine) -> str:
    refused = []
    for what, url in altered_urls(file.url):
        status = wire.fetch(url).status_code
        expect(400 <= status < 500, f"a 4xx for a file URL with its {what} altered", f"HTTP {status}")
        refused.append(f"{what}: {status}")
    return ", ".join(refused)


def _change_types(data: bytes, file: FileLine) -> list[str]:
    parquet = pq.ParquetFile(pa.BufferReader(data))
    if "_change_type" in parquet.schema_arrow.names:
        return [str(v) for v in parquet.read(columns=["_change_type"]).column(0).to_pylist()]
    value = file.partition_values.get("_change_type")
    expect(value is not None, "a _change_type column (or partition value) in each cdf file", parquet.schema_arrow.names)
    return [str(value)] * parquet.metadata.num_rows


def check_change_types(wire: Wire, cdf: list[FileLine]) -> str:
    """Each cdf file's ``_change_type`` values are the protocol's four; in every commit read whole,
    the update pre-images and post-images pair up."""
    by_version: dict[int, list[FileLine]] = {}
    for file in cdf:
        by_version.setdefault(file.version or 0, []).append(file)
    read_files, read_bytes, whole = 0, 0, 0
    seen: Counter[str] = Counter()
    for version, in_commit in sorted(by_version.items()):
        counts: Counter[str] = Counter()
        for file in in_commit:
            if read_files >= MAX_CHANGE_FILES or read_bytes + file.size > MAX_CHANGE_BYTES:
                return _summary(seen, read_files, whole, partial=True)
            types = _change_types(_read(wire, file, "a cdf file"), file)
            read_files, read_bytes = read_files + 1, read_bytes + file.size
            strange = set(types) - CHANGE_TYPES
            expect(not strange, f"_change_type among {sorted(CHANGE_TYPES)}", sorted(strange))
            counts.update(types)
        pre, post = counts["update_preimage"], counts["update_postimage"]
        if pre != post:
            raise Failed(f"as many update_preimage as update_postimage rows in version {version}", f"{pre} and {post}")
        whole += 1
        seen.update(counts)
    return _summary(seen, read_files, whole, partial=False)


def _summary(seen: Counter[str], read_files: int, whole: int, *, partial: bool) -> str:
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(seen.items())) or "no row"
    stopped = " (stopped at the read budget)" if partial else ""
    return f"{read_files} cdf file(s) read, {whole} commit(s) whole{stopped}: {kinds}"
