#!/usr/bin/env bash
# Connection setup at the paper's own round trips (issue 24; run by
# `make bench`): grid6 at factor 1.0, every ordered pair of sites measured
# through gridlink (one uncached connection, then ten cached, each used for
# three echo round trips) and set beside SmartSockets' Table 3
# (internal/lab/matrix/table3.tsv, with its source): uncached ≤ 3 network
# round trips + 100 ms, cached ≤ max(Table 3, one echo round trip + 5 ms).
# About 7 minutes. PAIRS="das3v:hiroshi desktop:rockstar" measures only
# those pairs; FACTOR=0.1 the test suite's round trips. Prints the tables.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_begin setup "$@"
FACTOR=${FACTOR:-1.0}
args=()
for p in ${PAIRS:-}; do args+=(--pair "$p"); done
$GRIDLAB down >/dev/null 2>&1 || true
ours=1
$GRIDLAB up grid6 --set factor="$FACTOR" >/dev/null
echo "## grid6 at factor $FACTOR: gridlink beside SmartSockets' Table 3"
echo
echo '```'
$GRIDLAB matrix grid6 --set factor="$FACTOR" --timeout 5s --gridlink-bin "$GRIDLINK" --bounds --paper "${args[@]}"
echo '```'
