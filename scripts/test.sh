#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: installs what it needs, then runs the checks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"  # Spark starts its Python workers as python3 from PATH
export SPARK_LOCAL_IP=127.0.0.1
export DELTAPORT_NO_SKIPS=${DELTAPORT_NO_SKIPS:-1}  # a missing dependency or service fails the run
export DELTAPORT_SHARED=${DELTAPORT_SHARED:-$(cd .. && pwd)/shared}
.venv/bin/lint-imports
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
.venv/bin/mypy --strict src/deltaport/delta src/deltaport/expressions src/deltaport/protocol src/deltaport/isotime.py \
  src/deltaport/server/sharing/change_feed.py src/deltaport/server/sharing/answers.py  # the core and the change feed, strictly
.venv/bin/vulture src/deltaport scripts/vulture_whitelist.py --min-confidence 60  # names nothing uses
set +e
# Two worker processes, each test file in one (module fixtures such as the Spark cluster are made
# once): much of the suite waits on servers and subprocesses, so the two overlap well.
.venv/bin/python -m pytest -n "${DELTAPORT_TEST_WORKERS:-2}" --dist loadfile "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
