#!/usr/bin/env bash
# Two gridlink binaries side by side on the `routed` topology (see
# bench/routed.sh), in the same lab and the same rounds, for a before and
# after of a change to links: OLD and NEW are gridlink binaries (default
# NEW=bin/gridlink; OLD is required). The hubs run HUBBIN (default NEW)
# with their defaults; b-n1 runs one perf server per binary, under the
# names old and new. Each round runs iperf3 -P 8 between the frontends,
# then, alternating, every case in CASES:
#   old, new     gridlink perf a-n1 -> b-n1 with that binary (resumable)
#   old0, new0   the same with --resume-timeout 0 (a link not resumable)
# with --streams STREAMS. Midway through each perf run it samples what is
# queued on the way: the TCP send and receive queues (ss) in a-n1, a-fe,
# b-fe and b-n1, and the hubs' own trunk queues (status --hub). One JSON
# line per run on stdout, then a table of medians.
#
#   OLD=/tmp/gridlink-main RTT=40ms RUNS=2 bench/routed_ab.sh
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin routed_ab "$@"

RTT=${RTT:-40ms}
RATE=${RATE:-400mbit}
LOSS=${LOSS:-0.1%}
CASES=${CASES:-old new old0 new0}
STREAMS=${STREAMS:-8}
SECS=${SECS:-10}
OMIT=${OMIT:-3}
RUNS=${RUNS:-2}
HUBFLAGS=${HUBFLAGS:-}
PERF_ARGS=${PERF_ARGS:-}
NEW=$(realpath "${NEW:-$BIN/gridlink}")
OLD=$(realpath "${OLD:?OLD: the gridlink binary to compare with}")
HUBBIN=$(realpath "${HUBBIN:-$NEW}")
A_FE=198.51.100.10 IPERF_PORT=5301
A_HUB=10.4.0.10:7946 B_HUB=10.6.0.10:7946
LIMIT=$((SECS + OMIT + 60))

make -s deps >&2
ours=1
$GRIDLAB up routed --set rtt="$RTT" --set rate="$RATE" --set loss="$LOSS" >/dev/null
EP=()
if [ "$(nproc)" -ge 2 ]; then
  taskset -a -p 1 "$(python3 -c 'import json; print(json.load(open("/run/gridlab/lab.json"))["emulator_pid"])')" >/dev/null
  EP=(taskset -c 1-$(($(nproc) - 1)))
fi
$GRIDLAB exec a-fe -- "${EP[@]}" iperf3 -s -p $IPERF_PORT >"$tmp/iperf3-s.log" 2>&1 & pids+=($!)
within 10 listening a-fe $IPERF_PORT || die "iperf3 -s did not start"
# shellcheck disable=SC2086
$GRIDLAB exec a-fe -- "${EP[@]}" "$HUBBIN" hub --name a --listen 0.0.0.0:7946 $HUBFLAGS >"$tmp/hub-a.log" 2>&1 & pids+=($!)
within 10 listening a-fe 7946 || die "hub a did not listen: $(tail -5 "$tmp/hub-a.log")"
# shellcheck disable=SC2086
$GRIDLAB exec b-fe -- "${EP[@]}" "$HUBBIN" hub --name b --listen 0.0.0.0:7946 --peer $A_FE:7946 $HUBFLAGS >"$tmp/hub-b.log" 2>&1 & pids+=($!)
within 10 listening b-fe 7946 || die "hub b did not listen: $(tail -5 "$tmp/hub-b.log")"
for v in old new; do
  bin=$OLD
  [ $v = new ] && bin=$NEW
  $GRIDLAB exec b-n1 -- "${EP[@]}" "$bin" perf --serve --name $v --hub $B_HUB >/dev/null 2>"$tmp/serve-$v.log" & pids+=($!)
  within 20 grep -q listening "$tmp/serve-$v.log" || die "perf --serve ($v) did not start: $(tail -5 "$tmp/serve-$v.log")"
done
sleep 3 # the trunk's round trip measured, its lanes dialled

sample() { # what is queued on the way, as JSON
  local out="{" sep=""
  for h in a-n1 a-fe b-fe b-n1; do
    q=$($GRIDLAB exec $h -- ss -tnH state established 2>/dev/null | awk '{r += $1; s += $2} END {printf "[%d, %d]", r, s}')
    out+="$sep\"$h\": $q"
    sep=", "
  done
  for h in a-fe b-fe; do
    q=$($GRIDLAB exec $h -- "$HUBBIN" status --hub --json 2>/dev/null | python3 -c '
import json, sys
try:
    st = json.load(sys.stdin)
except ValueError:
    print(-1); sys.exit()
print(sum(l.get("queued_bytes") or 0 for l in st.get("links") or []))' || echo -1)
    out+=", \"$h-hubq\": $q"
  done
  echo "$out}"
}

for round in $(seq "$RUNS"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$($GRIDLAB exec b-fe -- "${EP[@]}" timeout $LIMIT iperf3 -c $A_FE -p $IPERF_PORT -R -J -t "$SECS" -O "$OMIT" -P 8 || true)
  python3 -c '
import json, sys
rec = {"round": int(sys.argv[1]), "case": "iperf3-P8", "load": sys.argv[2]}
try:
    rec["mbit"] = json.loads(sys.stdin.read())["end"]["sum_received"]["bits_per_second"] / 1e6
except Exception as e:
    rec["error"] = "iperf3: %s" % e
print(json.dumps(rec))' "$round" "$load" <<<"$out" | tee -a "$tmp/results"
  for c in $CASES; do
    bin=$OLD name=old args=()
    case $c in
    new*) bin=$NEW name=new ;;
    esac
    case $c in
    *0) args=(--resume-timeout 0) ;;
    esac
    load=$(cut -d' ' -f1 /proc/loadavg)
    (sleep $((OMIT + SECS / 2)); sample >"$tmp/sample") &
    sp=$!
    # shellcheck disable=SC2086
    out=$($GRIDLAB exec a-n1 -- "${EP[@]}" timeout $LIMIT "$bin" perf $name --hub $A_HUB "${args[@]}" $PERF_ARGS --streams "$STREAMS" --data random --time $((SECS + OMIT)) --omit "$OMIT" --json 2>>"$tmp/perf.err" || true)
    wait $sp || true
    python3 -c '
import json, sys
rnd, case, load, sample = sys.argv[1:5]
rec = {"round": int(rnd), "case": case, "load": load}
try:
    rec["queued"] = json.loads(sample)
except ValueError:
    pass
try:
    r = json.loads(sys.stdin.read().strip().splitlines()[-1])
    if r.get("error"):
        rec["error"] = r["error"]
    else:
        rec["mbit"] = r["steady_mbit_per_s"]
        rec["mbit_all"] = r["mbit_per_s"]
        rec["sent_mbit"] = r.get("sent_steady_mbit_per_s") or r["steady_mbit_per_s"]
        rec["from"] = r.get("steady_from") or "sender"
        rec["method"] = r.get("method")
        rec["streams"] = r.get("streams")
        rec["stream_mb"] = [round(b / 1e6) for b in r.get("stream_bytes") or []]
        if r.get("resume"):
            rec["resume"] = r["resume"]
except Exception as e:
    rec["error"] = "gridlink perf: %s" % e
print(json.dumps(rec))' "$round" "$c" "$load" "$(cat "$tmp/sample" 2>/dev/null || echo '{}')" <<<"$out" | tee -a "$tmp/results"
  done
done
grep -h "perf:" "$tmp"/serve-*.log | tail -n $((2 * RUNS * $(wc -w <<<"$CASES"))) >&2 || true

python3 - "$tmp/results" <<PY
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else float("nan")
base = {r["round"]: r.get("mbit") for r in recs if r["case"] == "iperf3-P8"}
print()
print("routed_ab: RTT $RTT, $RATE, $LOSS loss, $STREAMS streams, $RUNS rounds of $SECS s after $OMIT s")
print("steady: counted by the receiver (iperf3's sum_received; perf's server timeline) unless marked; sender: perf's client over its own span")
print("| case | Mbit/s (steady) | of iperf3 -P 8 | sender | whole run | runs | window wait s | max kept MiB | loads |")
print("|---|---|---|---|---|---|---|---|---|")
for case in ["iperf3-P8"] + "$CASES".split():
    ks = [r for r in recs if r["case"] == case]
    vals = [r["mbit"] for r in ks if "mbit" in r]
    ratios = [r["mbit"] / base[r["round"]] for r in ks if "mbit" in r and base.get(r["round"])]
    alls = [r["mbit_all"] for r in ks if "mbit_all" in r]
    sent = [r["sent_mbit"] for r in ks if "sent_mbit" in r]
    sender = ("%.1f" % med(sent)) if sent else ""
    if {r["from"] for r in ks if "from" in r} - {"receiver"}:
        sender += " (steady counted by the sender: an old binary)"
    ww = [r["resume"]["window_wait_s"] for r in ks if r.get("resume")]
    mk = [r["resume"]["max_kept"] / 2**20 for r in ks if r.get("resume")]
    errs = [r["error"][:80] for r in ks if "error" in r]
    print("| %s | %.1f | %s | %s | %s | %s | %s | %s | %s |" % (case, med(vals), ("%.1f%%" % (100 * med(ratios))) if ratios and case != "iperf3-P8" else "", sender,
        ("%.1f" % med(alls)) if alls else "", " ".join("%.0f" % v for v in vals) + ("; errors: " + "; ".join(errs) if errs else ""),
        " ".join("%.1f" % v for v in ww), " ".join("%.1f" % v for v in mk), " ".join(r["load"] for r in ks)))
PY
