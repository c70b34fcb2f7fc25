#!/usr/bin/env bash
# Create .venv and install deltaport with everything the demo and the tests need.
# Idempotent: re-installs only when pyproject.toml, setup.py or the C source changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "deltaport needs Python >= 3.10 (found $("$PY" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.deltaport-installed
# what the install builds from: the project's metadata, and the compiled loops' source
want=$(cat pyproject.toml setup.py src/deltaport/_native.c | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev]"
  echo "$want" > "$stamp"
fi
# The compiled loops of an editable install live in the source tree (src/deltaport/_native*.so), so
# a clean of the tree (git clean -fdx) removes them while .venv stays: build them again.
if ! .venv/bin/python -c "import deltaport._native" 2>/dev/null; then
  .venv/bin/python -m pip install -q --no-deps -e .
fi
# libfaketime lets one signing test fix the clock of a library that reads the system time;
# without it that test is skipped. Best effort: only as root, and a failure changes nothing else.
if ! ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  { apt-get install -y -qq libfaketime >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libfaketime >/dev/null 2>&1; }; } \
    || echo "note: libfaketime could not be installed; one GCS signing test will be skipped" >&2
fi
