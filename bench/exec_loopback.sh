#!/usr/bin/env bash
# gridlink exec's stdin against gridlink nc on loopback, where the CPU
# bounds both (issue 21: stdin through exec at 90% of nc or more). No lab:
# a hub and two node agents on 127.0.0.1 in this namespace (a CA made for
# the run, b's grid-mapfile mapping a's node certificate to this user),
# then MIB MiB of zeros from a pipe, RUNS times each, into `gridlink exec b
# 'cat >/dev/null'` and into `gridlink nc b:9` (every agent's sink), with
# the CPU seconds of both agents, the exec or nc client and cat. Several
# binaries (BINS="old new", paths) run one after another, ROUNDS times,
# each with agents of its own, so that they are compared in the same run.
# WAYS adds exec0: gridlink exec --resume-timeout 0 (links that are not
# resumable, as nc's to the sink is not: the sink takes raw connections;
# skipped for a binary without the option) and ncx: gridlink nc to a TCP
# service on b that gridlink expose publishes (socat writing to
# /dev/null): a resumable link as exec's and a process reading the bytes
# as cat reads exec's, where the sink takes raw connections in the agent.
# Prints one line per transfer and a summary per binary.
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${MIB:-1024}
RUNS=${RUNS:-3}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-17946}
DPORT=${DPORT:-17947} # ncx's discarding TCP service on b
BINS=${BINS:-bin/gridlink}
WAYS=${WAYS:-exec nc}
tmp=$(mktemp -d /tmp/gridlink-exec-loopback.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT

first=${BINS%% *}
"$first" ca init --dir "$tmp/ca" --name loop --no-passphrase >/dev/null
for n in h a b; do
  role=node; [ $n = h ] && role=hub
  "$first" cert issue --dir "$tmp/ca" --role $role --name $n --key "$tmp/$n.key" --out "$tmp/$n.pem" >/dev/null
done
echo "\"/O=loop/OU=node/CN=a\" $(id -un)" >"$tmp/map"
C=(--ca "$tmp/ca/ca.pem" --crl "$tmp/ca/crl.pem")
cpu() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }

echo "loopback, $MIB MiB per transfer, $RUNS transfers each way per round, $ROUNDS rounds; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  for bin in $BINS; do
    B=$(realpath "$bin")
    rm -f "$tmp"/*.sock
    "$B" hub --name h --listen 127.0.0.1:$PORT "${C[@]}" --key "$tmp/h.key" --cert "$tmp/h.pem" >"$tmp/hub.log" 2>&1 & hp=$!
    sleep 0.5
    "$B" node --name b --hub 127.0.0.1:$PORT "${C[@]}" --key "$tmp/b.key" --cert "$tmp/b.pem" --allow-exec --grid-mapfile "$tmp/map" --control "$tmp/b.sock" >"$tmp/b.log" 2>&1 & bp=$!
    "$B" node --name a --hub 127.0.0.1:$PORT "${C[@]}" --key "$tmp/a.key" --cert "$tmp/a.pem" --control "$tmp/a.sock" >"$tmp/a.log" 2>&1 & ap=$!
    pids=($hp $bp $ap)
    for _ in $(seq 50); do "$B" exec --control "$tmp/a.sock" b true 2>/dev/null && break; sleep 0.2; done
    case " $WAYS " in *" ncx "*)
      socat -u -b 262144 TCP-LISTEN:$DPORT,bind=127.0.0.1,reuseaddr,fork OPEN:/dev/null & pids+=($!)
      "$B" expose $DPORT --control "$tmp/b.sock" >"$tmp/expose.log" 2>&1 & pids+=($!)
      sleep 0.5 ;;
    esac
    for r in $(seq "$RUNS"); do
      for way in $WAYS; do
        xo=()
        if [ $way = exec0 ]; then
          xo=(--resume-timeout 0)
          "$B" exec --control "$tmp/a.sock" "${xo[@]}" b true 2>/dev/null || continue
        fi
        a0=$(cpu $ap) b0=$(cpu $bp) t0=$(date +%s.%N)
        if [ $way = exec ] || [ $way = exec0 ]; then
          head -c "$MIB"M /dev/zero | /usr/bin/time -f "%U %S" -o "$tmp/client" "$B" exec --control "$tmp/a.sock" "${xo[@]}" b "/usr/bin/time -f '%U %S' -o $tmp/cat cat >/dev/null"
        else
          echo "0 0" >"$tmp/cat" # ncx: socat's CPU not counted
          dst=b:9
          [ $way = ncx ] && dst=b:$DPORT
          head -c "$MIB"M /dev/zero | /usr/bin/time -f "%U %S" -o "$tmp/client" "$B" nc --control "$tmp/a.sock" $dst >/dev/null
        fi
        t1=$(date +%s.%N) a1=$(cpu $ap) b1=$(cpu $bp)
        awk -v bin="$bin" -v w=$way -v t0="$t0" -v t1="$t1" -v m="$MIB" -v a0="$a0" -v a1="$a1" -v b0="$b0" -v b1="$b1" \
          -v cl="$(cat "$tmp/client")" -v ca="$(cat "$tmp/cat")" 'BEGIN {
            split(cl, c, " "); split(ca, k, " "); gib = m / 1024
            printf "%s %s %.0f Mbit/s; CPU s/GiB: agent a %.2f, agent b %.2f, client %.2f, cat %.2f\n", bin, w,
              m * 8 * 1.048576 / (t1 - t0), (a1 - a0) / gib, (b1 - b0) / gib, (c[1] + c[2]) / gib, (k[1] + k[2]) / gib }'
      done
    done
    for p in "${pids[@]:3}"; do kill "$p" 2>/dev/null || true; done
    kill $ap $bp; sleep 0.3; kill $hp; wait 2>/dev/null || true
    pids=()
  done
done | tee "$tmp/lines"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| binary | exec (Mbit/s, median) | nc (Mbit/s, median) | exec / nc | exec0 (Mbit/s, median) | exec0 / nc | ncx (Mbit/s, median) | exec / ncx |"
echo "|---|---|---|---|---|---|---|---|"
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for bin in $BINS; do
  e=$(awk -v bin="$bin" '$1 == bin && $2 == "exec" {print $3}' "$tmp/lines" | median)
  n=$(awk -v bin="$bin" '$1 == bin && $2 == "nc" {print $3}' "$tmp/lines" | median)
  z=$(awk -v bin="$bin" '$1 == bin && $2 == "exec0" {print $3}' "$tmp/lines" | median)
  x=$(awk -v bin="$bin" '$1 == bin && $2 == "ncx" {print $3}' "$tmp/lines" | median)
  awk -v bin="$bin" -v e="$e" -v n="$n" -v z="$z" -v x="$x" 'BEGIN {
    printf "| %s | %.0f | %.0f | %.2f |", bin, e, n, e / n
    if (z == "" || z == 0) printf " | |"; else printf " %.0f | %.2f |", z, z / n
    if (x == "" || x == 0) printf " | |\n"; else printf " %.0f | %.2f |\n", x, e / x }'
done
