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
#
# ATTACH=N: hubserver.BenchmarkFloodAttach instead (issue 32 item 6): per
# round N attaches to the idle hub, then N during the flood (REDIAL 4s by
# default: about 5,000 new connections a second), ROUNDS rounds; a row a
# phase (attach p50/p99/max, connects that waited for a dropped SYN, the
# hub's CPU time, the flood's rate, listen overflows, RSS, descriptors)
# and the pooled percentiles. With GRIDLINK="old new" (two builds' hubs)
# the runs alternate between them.
#
#   ATTACH=60 ROUNDS=3 RUNS=2 GRIDLINK="/tmp/old/gridlink bin/gridlink" bench/flood.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
CONNS=${CONNS:-20000}
if [ -z "${GRIDLINK:-}" ]; then
  go build -o bin/gridlink ./cmd/gridlink
  GRIDLINK=$PWD/bin/gridlink
fi
if [ -n "${ATTACH:-}" ]; then
  REDIAL=${REDIAL:-4s}
  go test -c -o bin/hubserver.test ./hub/hubserver
  echo "flood of $CONNS connections (each redialled at most every $REDIAL), $(nproc) CPUs, $(date -u '+%F %H:%M UTC'), $(uptime | sed 's/.*load average/load average/')"
  for run in $(seq "$RUNS"); do
    for hub in $GRIDLINK; do
      echo
      echo "run $run, hub $hub:"
      (cd hub/hubserver && GRIDLINK_BIN=$(realpath "$hub") GRIDLINK_FLOOD_CONNS=$CONNS GRIDLINK_FLOOD_REDIAL=$REDIAL \
        GRIDLINK_FLOOD_ATTACHES=$ATTACH GRIDLINK_FLOOD_ROUNDS=${ROUNDS:-3} \
        ../../bin/hubserver.test -test.run '^$' -test.bench '^BenchmarkFloodAttach$' -test.benchtime 1x -test.v 2>&1 |
        grep -E 'flood_bench_test.go' | sed 's/^ *flood_bench_test.go:[0-9]*: //' || true)
    done
  done
  exit 0
fi
REDIAL=${REDIAL:-5s}  # a flooding connection redials at most this often (0: at once)
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
