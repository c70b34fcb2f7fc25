#!/usr/bin/env bash
# The main job on an embedded default: build the demo tables and show what the engine reads.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/deltaport demo "${1:-.demo}"
