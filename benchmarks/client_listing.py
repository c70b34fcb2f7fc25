"""The connector's listing of a table of many files: time and peak memory, beside the official client.

    python benchmarks/client_listing.py [--workdir .bench/client_listing] [--files 1000000]
                                        [--page 100000] [--skip-official] [--only LISTER]

Generates (once, then reuses) a log-only table of ``--files`` files with gen_big_table.py, serves
it with ``deltaport serve`` (its own process) on 127.0.0.1, and lists its files in the same run,
each lister in a fresh subprocess:

  deltaport        RestClient.query_table: the whole listing, held (as load_as_arrow holds it)
  deltaport-paged  RestClient.query_pages with maxFiles=--page: one page held at a time (as
                   load_as_arrow_reader reads it)
  official         delta_sharing.rest_client.DataSharingRestClient.list_files_in_table: the
                   official client's listing, every file an AddFile object (it has no paging)

``--only`` runs the listers named (repeat it for more than one). Each line gives the files listed,
the seconds, the lister's peak RSS and its RSS before listing (imports, and pyarrow's first array:
~50 MB once), and the difference per file. The server's own memory is not counted. The connector
keeps at most ``file_list.MEMORY_BUDGET`` (64 MiB) of its listing in memory and the rest in a
temporary file in TMPDIR, whose size is not counted either. 10M files (``--files 10000000``) is for
a quiet machine with plenty of memory for the server.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from serve_process import ServeProcess

HERE = Path(__file__).resolve().parent

_RSS = r"""
import pyarrow as pa
pa.record_batch([pa.array([0])], names=["x"])  # pyarrow's first array costs ~50 MB of RSS, once: not the listing's
def status_mb(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key)) / 1024
def rss_mb():
    return status_mb("VmRSS:")
def peak_mb():  # VmHWM, not ru_maxrss: that one keeps the parent's high-water mark across fork and exec
    return status_mb("VmHWM:")
"""

LISTERS = {
    "deltaport": _RSS
    + r"""
import sys, time
from deltaport.client.rest import RestClient
rest = RestClient(sys.argv[1]); start = rss_mb(); t0 = time.perf_counter()
files = len(rest.query_table(sys.argv[2]).files)
print(time.perf_counter() - t0, files, peak_mb(), start)
""",
    "deltaport-paged": _RSS
    + r"""
import sys, time
from deltaport.client.rest import QueryOptions, RestClient
rest = RestClient(sys.argv[1]); start = rss_mb(); t0 = time.perf_counter()
files = sum(len(page.files) for _, page in rest.query_pages(sys.argv[2], QueryOptions(max_files=int(sys.argv[3]))))
print(time.perf_counter() - t0, files, peak_mb(), start)
""",
    "official": _RSS
    + r"""
import sys, time
from delta_sharing.protocol import DeltaSharingProfile, Table
from delta_sharing.rest_client import DataSharingRestClient
share, schema, name = sys.argv[2].split(".")
rest = DataSharingRestClient(DeltaSharingProfile.read_from_file(sys.argv[1])); start = rss_mb()
t0 = time.perf_counter()
files = len(rest.list_files_in_table(Table(name, share, schema)).add_files)
print(time.perf_counter() - t0, files, peak_mb(), start)
""",
}


def table(workdir: Path, files: int) -> Path:
    path = workdir / f"table-{files}"
    if not (path / "_delta_log" / "_last_checkpoint").exists():
        sys.path.insert(0, str(HERE))
        from gen_big_table import generate

        generate(path, files, 2, force=True)
    return path


def serve(path: Path, workdir: Path) -> tuple[ServeProcess, Path]:
    server = ServeProcess(
        {
            "version": 1,
            "preSignedUrlTimeoutSeconds": 3600,
            "authorization": {"bearerToken": "bench-token"},
            "shares": [{"name": "bench", "schemas": [{"name": "s", "tables": [{"name": "t", "location": str(path)}]}]}],
        },
        workdir,
    )
    profile = workdir / "bench.share"
    profile.write_text(
        json.dumps(
            {"shareCredentialsVersion": 1, "endpoint": f"{server.base}/delta-sharing", "bearerToken": "bench-token"}
        )
    )
    return server, profile


def run(lister: str, profile: Path, page: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", LISTERS[lister], str(profile), "bench.s.t", str(page)],
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if out.returncode != 0:
        raise SystemExit(f"{lister} failed:\n{out.stderr[-2000:]}")
    seconds, files, peak, start = out.stdout.strip().splitlines()[-1].split()
    grown = float(peak) - float(start)
    return {
        "lister": lister,
        "files": int(files),
        "seconds": round(float(seconds), 2),
        "peak_rss_mb": round(float(peak)),
        "rss_before_mb": round(float(start)),
        "bytes_per_file": round(grown * 1024 * 1024 / max(int(files), 1)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default=str(HERE.parent / ".bench" / "client_listing"))
    ap.add_argument("--files", type=int, default=1_000_000, help="files in the generated table's checkpoint")
    ap.add_argument("--page", type=int, default=100_000, help="maxFiles of the paged listing")
    ap.add_argument("--skip-official", action="store_true")
    ap.add_argument("--only", action="append", choices=list(LISTERS), help="run only this lister (repeatable)")
    args = ap.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    server, profile = serve(table(workdir, args.files), workdir)
    try:
        for lister in args.only or LISTERS:
            if lister == "official" and args.skip_official:
                continue
            print(json.dumps(run(lister, profile, args.page)), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
