#!/usr/bin/env bash
# A flood of unauthenticated connections at a hub (issue 16, hole 4): the
# figures of hubserver.TestFloodNewNodeAttaches, RUNS times. A gridlink hub runs
# in its own process on loopback; four flooders (the test binary re-run)
# hold CONNS connections from 8000 addresses of 127.0.0.0/8, half idle,
# half with half a ClientHello sent, redialling each one the hub closes,
# for at most 25 s; during the flood five new nodes attach one after the
# other. Prints per run: connections opened, attach time without a flood
# and during it (median, max), the hub's largest RSS (VmRSS) and
# descriptor count, and the lines it logged. No lab and no root needed
# (loopback only); each process needs CONNS/4 descriptors (ulimit -n).
#
#   bench/flood.sh                       # this tree's hub, CONNS=20000, RUNS=3
#   GRIDLINK=/tmp/old/gridlink bench/flood.sh   # another build's hub (before/after)
#   RACE=1 bench/flood.sh                # flooders built with -race, as in make test
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
CONNS=${CONNS:-20000}
REDIAL=${REDIAL:-5s}  # a flooding connection redials at most this often (0: at once)
if [ -z "${GRIDLINK:-}" ]; then
  go build -o bin/gridlink ./cmd/gridlink
  GRIDLINK=$PWD/bin/gridlink
fi
race=()
if [ -n "${RACE:-}" ]; then race=(-race); fi
echo "flood of $CONNS connections (each redialled at most every $REDIAL), hub $GRIDLINK, $(nproc) CPUs, $(uptime | sed 's/.*load average/load average/')"
echo
echo "| run | opened | attach calm ms | attach median ms | attach max ms | hub RSS max KiB | hub fds max | hub log lines | result |"
echo "|---|---|---|---|---|---|---|---|---|"
for run in $(seq "$RUNS"); do
  out=$(GRIDLINK_BIN=$GRIDLINK GRIDLINK_FLOOD_CONNS=$CONNS GRIDLINK_FLOOD_REDIAL=$REDIAL go test "${race[@]}" -count=1 -run '^TestFloodNewNodeAttaches$' -v ./hub/hubserver 2>&1 || true)
  fig=$(grep -o 'FIGURES .*' <<<"$out" || true)
  result=$(grep -Eo -- '--- (PASS|FAIL)' <<<"$out" | head -1 | cut -c5-)
  if [ -z "$fig" ]; then
    echo "$out" | tail -20 >&2
    echo "| $run | ? | | | | | | | ${result:-error} |"
    continue
  fi
  get() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$fig"; }
  echo "| $run | $(get opened) | $(get attach_calm_ms) | $(get attach_median_ms) | $(get attach_max_ms) | $(get hub_rss_max_kib) | $(get hub_fds_max) | $(get hub_log_lines) | $result |"
done
