#!/usr/bin/env bash
# Unmodified applications (issue 7), for BENCHMARKS.md (needs root). On the
# `wan` topology (hosts a and b, one emulated link of RTT and RATE), host b
# runs a TCP sink (socat to /dev/null) published with `gridlink expose`;
# host a sends MIB MiB to it, RUNS rounds of four ways, one after another:
#   api      a Go program using the gridlink API directly (its own node,
#            gridlink.Dial to b:9000): the baseline
#   socks    the same sender through `gridlink socks` (CONNECT b.grid:9000)
#   forward  the same sender to `gridlink forward 127.0.0.1:9001 b.grid:9000`
#   nc       head -c | `gridlink nc b.grid:9000`
# Every way uses one encrypted stream (the link defaults). The sender is
# bench/appsend.go for api, socks and forward, so that only the way
# differs; a rate counts from the first byte until the sink has closed after
# reading everything. Prints markdown: per-run rates, medians and each way's
# median ratio to the api median of the same run.
#
# Everything runs inside lab namespaces; the lab lock of lab tests
# (/run/gridlab/test.lock) is held for the whole run, and the lab is torn
# down at the end, also on failure or Ctrl-C.
# Its hubs and nodes run an open grid (no --ca) on purpose: what admission
# by a CA costs is bench/security.sh's to measure.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin apps "$@"

RTT=${RTT:-10ms}
RATE=${RATE:-1gbit}
MIB=${MIB:-256}
RUNS=${RUNS:-3}
HUB=198.51.100.10:7946 # wan: host a

bg() { # HOST LOG COMMAND...: run in the background in HOST
  local h=$1 log=$2; shift 2
  $GRIDLAB exec "$h" -- "$@" >"$tmp/$log.log" 2>&1 &
  pids+=($!)
}

go build -o "$tmp/appsend" bench/appsend.go
$GRIDLAB down >/dev/null 2>&1 || true
ours=1
$GRIDLAB up wan --set rtt="$RTT" --set rate="$RATE" >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; die "gridlab up failed"; }

bg a hub "$GRIDLINK" hub --name a --listen 0.0.0.0:7946
within 10 $GRIDLAB exec a -- "$GRIDLINK" status --hub || die "hub did not start"
bg a node-a "$GRIDLINK" node --name a --hub "$HUB"
bg b node-b "$GRIDLINK" node --name b --hub "$HUB"
within 20 $GRIDLAB exec a -- "$GRIDLINK" ping --dials 1 b || die "a cannot reach b: $(cat "$tmp"/node-*.log)"
bg b sink socat -u TCP-LISTEN:9000,bind=127.0.0.1,reuseaddr,fork OPEN:/dev/null
bg b expose "$GRIDLINK" expose 9000
bg a socks "$GRIDLINK" socks --listen 127.0.0.1:1080
bg a forward "$GRIDLINK" forward 127.0.0.1:9001 b.grid:9000
within 10 grep -q "reachable as" "$tmp/expose.log" || die "expose: $(cat "$tmp/expose.log")"
within 10 grep -q "listening on" "$tmp/socks.log" || die "socks: $(cat "$tmp/socks.log")"

nc_send() { # prints the rate like appsend
  local t0 t1
  t0=$(date +%s.%N)
  head -c "$((MIB << 20))" /dev/zero | $GRIDLAB exec a -- "$GRIDLINK" nc b.grid:9000 >/dev/null
  t1=$(date +%s.%N)
  awk -v b="$((MIB << 20))" -v a="$t0" -v z="$t1" 'BEGIN {printf "%.1f %d %.3f\n", b * 8 / (z - a) / 1e6, b, z - a}'
}
declare -A rates
for r in $(seq "$RUNS"); do
  for way in api socks forward nc; do
    case $way in
      api) out=$($GRIDLAB exec a -- "$tmp/appsend" api "$HUB" b:9000 "$MIB") ;;
      socks) out=$($GRIDLAB exec a -- "$tmp/appsend" socks 127.0.0.1:1080 b.grid:9000 "$MIB") ;;
      forward) out=$($GRIDLAB exec a -- "$tmp/appsend" tcp 127.0.0.1:9001 "$MIB") ;;
      nc) out=$(nc_send) ;;
    esac
    rates[$way]="${rates[$way]:-} ${out%% *}"
    echo "run $r $way: $out Mbit/s bytes s" >&2
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
base=$(median <<<"${rates[api]}")
echo "wan rtt=$RTT rate=$RATE, $MIB MiB per run, $RUNS runs, one encrypted stream"
echo
echo "| way | runs (Mbit/s) | median (Mbit/s) | ratio to api |"
echo "|---|---|---|---|"
for way in api socks forward nc; do
  m=$(median <<<"${rates[$way]}")
  awk -v w="$way" -v runs="${rates[$way]}" -v m="$m" -v b="$base" 'BEGIN {printf "| %s |%s | %.1f | %.3f |\n", w, runs, m, m / b}'
done
