#!/usr/bin/env bash
# Lab benchmarks for BENCHMARKS.md (needs root; run by `make bench`).
#  1. direct virtual connection vs plain TCP (iperf3) between the two hosts
#     of the `wan` topology, alternating runs, medians and their ratio;
#  2. grid6 connection setup times against the connectivity core's bounds.
# Prints markdown. Everything it starts runs inside lab namespaces and is
# torn down at the end, also on failure. Part 1 runs an open grid (no --ca)
# on purpose; gridlab's matrix and traversal overlays are admitted by the
# lab CA (the cost of admission is bench/security.sh's to measure).
set -euo pipefail
LOCK=${LOCK:-/run/gridlab/test.lock} # the lab tests' lock (internal/lab/labtest)
if [ -z "${LAB_LOCKED:-}" ]; then
  mkdir -p "$(dirname "$LOCK")"
  LAB_LOCKED=1 exec flock -o "$LOCK" "$BASH" "$(realpath "$0")" "$@"
fi
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
RTT=${RTT:-20ms}
RATE=${RATE:-400mbit}
SECS=${SECS:-10}
RUNS=${RUNS:-3}
trap '$BIN/gridlab down >/dev/null 2>&1 || true' EXIT

median() { sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]}'; }
round() { for x in "$@"; do printf '%.1f ' "$x"; done; }

$BIN/gridlab down >/dev/null
$BIN/gridlab up wan --set rtt=$RTT --set rate=$RATE >/dev/null
# The link emulator is one busy thread carrying every packet (a whole CPU
# at 400 Mbit/s); endpoints that took CPU time from it would slow the
# emulated link, not the protocol. With PIN=1 (the default on 2+ CPUs) the
# emulator gets CPU 0 and the endpoints, iperf3 and gridlink alike, the
# rest, as a real WAN's routers do not share the hosts' CPUs.
EP=()
if [ "${PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
  taskset -a -p 1 "$(python3 -c 'import json; print(json.load(open("/run/gridlab/lab.json"))["emulator_pid"])')" >/dev/null
  EP=(taskset -c 1-$(($(nproc) - 1)))
fi
$BIN/gridlab exec a -- "${EP[@]}" $BIN/gridlink hub --name a --listen 0.0.0.0:7946 >/dev/null 2>&1 &
sleep 0.5
$BIN/gridlab exec a -- "${EP[@]}" $BIN/gridlink node --name a --hub 127.0.0.1:7946 >/dev/null 2>&1 &
$BIN/gridlab exec b -- "${EP[@]}" $BIN/gridlink node --name b --hub 198.51.100.10:7946 >/dev/null 2>&1 &
$BIN/gridlab exec b -- "${EP[@]}" $BIN/gridlink perf --serve --name b-perf --hub 198.51.100.10:7946 >/dev/null 2>&1 &
for i in $(seq 50); do $BIN/gridlab exec a -- $BIN/gridlink ping --dials 1 --count 1 b >/dev/null 2>&1 && break; sleep 0.2; done

plain=(); glink=()
for i in $(seq $RUNS); do
  $BIN/gridlab exec b -- "${EP[@]}" iperf3 -s -1 -D
  sleep 0.3
  plain+=("$($BIN/gridlab exec a -- "${EP[@]}" iperf3 -c 198.51.100.26 -t $SECS -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6)')")
  glink+=("$($BIN/gridlab exec a -- "${EP[@]}" $BIN/gridlink perf b-perf --hub 127.0.0.1:7946 -t $SECS --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["mbit_per_s"]) if not r.get("error") else sys.exit(r["error"])')")
done
p=$(printf '%s\n' "${plain[@]}" | median); g=$(printf '%s\n' "${glink[@]}" | median)
echo "### Direct virtual connection vs plain TCP, wan topology (rtt $RTT, $RATE${EP:+; emulator on CPU 0, endpoints on ${EP[2]}})"
echo
echo "| | Mbit/s (median of $RUNS x ${SECS}s) | runs |"
echo "|---|---|---|"
echo "| plain TCP (iperf3) | $p | $(round "${plain[@]}")|"
echo "| gridlink direct (TLS 1.3) | $g | $(round "${glink[@]}")|"
echo "| **ratio** | **$(python3 -c "print(f'{$g/$p*100:.1f}%')")** | |"
echo
$BIN/gridlab down >/dev/null

echo "### Connection setup on grid6 (factor 0.1) against the bounds"
echo
echo '```'
$BIN/gridlab matrix grid6 --bounds 2>/dev/null
echo '```'

echo
echo "### NAT traversal across nat-zoo (20 uncached connections per ordered pair)"
echo
echo '```'
$BIN/gridlab traversal nat-zoo --attempts 20 2>/dev/null
echo '```'
