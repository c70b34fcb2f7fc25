#!/usr/bin/env bash
# The main job on an embedded default: build demo tables, serve them over Delta Sharing, read them back.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"  # Spark starts its Python workers as python3 from PATH
exec .venv/bin/deltaport demo "${1:-.demo}" --read-back --port "${PORT:-8765}"
