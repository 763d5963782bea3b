#!/usr/bin/env bash
# Unmodified applications (issue 7), for BENCHMARKS.md (needs root). On the
# `wan` topology (hosts a and b, one emulated link of RTT and RATE), host b
# runs a TCP sink (bench/appsend.go sink) published with `gridlink expose`;
# host a sends MIB MiB to it, RUNS rounds of four ways, one after another:
#   api      a Go program using the gridlink API directly (its own node,
#            gridlink.Dial to b:9000): the baseline
#   socks    the same sender through `gridlink socks` (CONNECT b.grid:9000)
#   forward  the same sender to `gridlink forward 127.0.0.1:9001 b.grid:9000`
#   nc       the same sender writing to a pipe into `gridlink nc b.grid:9000`
# Every way uses one encrypted stream (the link defaults). The sender is
# bench/appsend.go in every way (256 KiB writes), so that only the way
# differs. Rates are the sink's: from the first byte it reads until the
# sender's EOF, the same measure for every way (process start-up and link
# setup left out); the senders' own rates, timed from their first write
# to the sink's close, go to stderr. Prints markdown: per-run rates,
# medians, each way's median ratio to the api median of the same run, and
# the CPU time the sending host a spent per GiB in each way (the sender,
# nc, socks or forward, and the agent; the receiving side and the
# emulator are the same in every way): less noisy than rates on a busy
# machine, and where the ways differ.
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
  pid[$log]=$! # gridlab exec and ip netns exec exec: the command's own pid
}
declare -A pid

go build -o "$tmp/appsend" bench/appsend.go
$GRIDLAB down >/dev/null 2>&1 || true
ours=1
$GRIDLAB up wan --set rtt="$RTT" --set rate="$RATE" >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; die "gridlab up failed"; }

bg a hub "$GRIDLINK" hub --name a --listen 0.0.0.0:7946
within 10 $GRIDLAB exec a -- "$GRIDLINK" status --hub || die "hub did not start"
bg a node-a "$GRIDLINK" node --name a --hub "$HUB"
bg b node-b "$GRIDLINK" node --name b --hub "$HUB"
within 20 $GRIDLAB exec a -- "$GRIDLINK" ping --dials 1 b || die "a cannot reach b: $(cat "$tmp"/node-*.log)"
bg b sink "$tmp/appsend" sink 127.0.0.1:9000
bg b expose "$GRIDLINK" expose 9000
bg a socks "$GRIDLINK" socks --listen 127.0.0.1:1080
bg a forward "$GRIDLINK" forward 127.0.0.1:9001 b.grid:9000
within 10 listening b 9000 || die "sink: $(cat "$tmp/sink.log")"
within 10 grep -q "reachable as" "$tmp/expose.log" || die "expose: $(cat "$tmp/expose.log")"
within 10 grep -q "listening on" "$tmp/socks.log" || die "socks: $(cat "$tmp/socks.log")"

sunk=0
sink_rate() { # sets out to the sink's next line (the way just run)
  sunk=$((sunk + 1))
  within 10 test "$(wc -l <"$tmp/sink.log")" -ge "$sunk" || die "sink: no report: $(cat "$tmp/sink.log")"
  out=$(sed -n "${sunk}p" "$tmp/sink.log")
}
# CPU on host a, the sending side: the sender (and nc) run under bash,
# whose `times` reports what its children used; the agent, socks and
# forward are read from /proc before and after each way.
on_a() { # SCRIPT ARGS...: bash -c SCRIPT on host a; sets sent (its output) and kids (children's CPU, s)
  local o
  o=$($GRIDLAB exec a -- bash -c "$1"'; times' - "${@:2}")
  kids=$(tail -1 <<<"$o" | awk '{for (i = 1; i <= 2; i++) {split($i, t, "m"); s += t[1] * 60 + t[2]}} END {print s}')
  sent=$(head -n -2 <<<"$o")
}
daemons() { for p in "${pid[node-a]}" "${pid[socks]}" "${pid[forward]}"; do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s}'; }
tck=$(getconf CLK_TCK)
declare -A rates cpus
for r in $(seq "$RUNS"); do
  for way in api socks forward nc; do
    d0=$(daemons)
    case $way in
      api) on_a '"$1" api "$2" b:9000 "$3"' "$tmp/appsend" "$HUB" "$MIB" ;;
      socks) on_a '"$1" socks 127.0.0.1:1080 b.grid:9000 "$2"' "$tmp/appsend" "$MIB" ;;
      forward) on_a '"$1" tcp 127.0.0.1:9001 "$2"' "$tmp/appsend" "$MIB" ;;
      nc) t0=$(date +%s.%N)
        on_a '"$1" pipe "$2" | "$3" nc b.grid:9000 >/dev/null' "$tmp/appsend" "$MIB" "$GRIDLINK"
        sent="$(awk -v a="$t0" -v z="$(date +%s.%N)" 'BEGIN {printf "%.3f s with start-up", z - a}')" ;;
    esac
    sink_rate
    cpu=$(awk -v k="$kids" -v d="$(($(daemons) - d0))" -v t="$tck" -v m="$MIB" 'BEGIN {printf "%.3f", (k + d / t) * 1024 / m}')
    rates[$way]="${rates[$way]:-} ${out%% *}"
    cpus[$way]="${cpus[$way]:-} $cpu"
    echo "run $r $way: sink $out Mbit/s bytes s; sender $sent; host a CPU $cpu s/GiB" >&2
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
base=$(median <<<"${rates[api]}")
echo "wan rtt=$RTT rate=$RATE, $MIB MiB per run, $RUNS runs, one encrypted stream, rates at the sink (first byte to last)"
echo
echo "| way | runs (Mbit/s) | median (Mbit/s) | ratio to api | host a CPU, median (s/GiB) |"
echo "|---|---|---|---|---|"
for way in api socks forward nc; do
  m=$(median <<<"${rates[$way]}")
  c=$(median <<<"${cpus[$way]}")
  awk -v w="$way" -v runs="${rates[$way]}" -v m="$m" -v b="$base" -v c="$c" 'BEGIN {printf "| %s |%s | %.1f | %.3f | %.2f |\n", w, runs, m, m / b, c}'
done
