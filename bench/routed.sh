#!/usr/bin/env bash
# Routed at full speed (issue 20), for BENCHMARKS.md (needs root). On the
# `routed` topology: two sites whose nodes (a-n1, b-n1: cluster addresses
# only) reach each other only through their frontends' hubs (a-fe, b-fe),
# across one emulated link of RATE and LOSS, once per round trip in RTTS.
# b-fe's hub dials a-fe's (site b is firewalled), so every routed byte
# crosses that one trunk. For each hub SETTING in SETTINGS, with the hubs
# restarted:
#   new   the hubs' defaults: a trunk of several TCP connections (one per
#         10 ms of its round trip, up to 8), bbr where the kernel has it
#   old   --trunk-connections 1 --trunk-cc default: one connection, the
#         kernel's congestion control (what hubs did before)
#   cubic new's connections with cubic: what bbr brings (where the
#         kernel's default is bbr, old runs bbr too)
#   one   one connection with bbr (not in the defaults)
# RUNS rounds of, one after another:
#   iperf3 -P 8 between the frontends (a-fe -> b-fe): what the link carries
#   gridlink perf a-n1 -> b-n1, routed, --streams 1, 8 and auto
# Rates are the received application rate after OMIT s of ramp-up over SECS
# s, counted at the receiver for both (iperf3's sum_received; gridlink
# perf's steady rate from the server's timeline, steady_from "receiver");
# the sender's count over its span (which also counts what the buffers on
# the way grew by: a resumable link's window grows up to 128 MiB) is in a
# column of its own. Ratios are medians of per-round ratios against the
# iperf3 of the same round. The perf runs must report method "routed" (else the run is
# flagged). The trunk's connections and congestion control, from b-fe's
# `gridlink status --hub --json`, are printed beside each setting.
#
# With PIN=1 (the default on 2+ CPUs) the link emulator gets CPU 0 and
# every endpoint the other CPUs, as in bench/lab.sh. Before each run it
# waits for a quiet machine (QUIET, QUIET_WAIT) and reports how busy the
# machine was: on a shared machine the figures are rough.
#
# Everything runs inside lab namespaces; the lab lock of lab tests
# (/run/gridlab/test.lock) is held for the whole run (about 12 minutes
# with the defaults), and everything is torn down at the end, also on
# failure or Ctrl-C. An open grid (no --ca), like bench/links.sh.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin routed "$@"

RTTS=${RTTS:-160ms 40ms}
RATE=${RATE:-400mbit}
LOSS=${LOSS:-0.1%}
SETTINGS=${SETTINGS:-new old cubic}
STREAMS=${STREAMS:-1 8 auto}
SECS=${SECS:-10}
OMIT=${OMIT:-3}
PERF_ARGS=${PERF_ARGS:-} # more flags for the perf client, e.g. --resume-timeout 0 (a link that is not resumable)
RUNS=${RUNS:-2}
QUIET=${QUIET:-30}
QUIET_WAIT=${QUIET_WAIT:-60}
A_FE=198.51.100.10 IPERF_PORT=5301
A_HUB=10.4.0.10:7946 B_HUB=10.6.0.10:7946
LIMIT=$((SECS + OMIT + 60))

cpu() { head -1 /proc/stat | awk '{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}'; }
busy() { # machine CPU busy % over $1 s
  local a b; a=$(cpu); sleep "$1"; b=$(cpu)
  awk -v a="$a" -v b="$b" 'BEGIN {split(a, x); split(b, y); printf "%d", 100 * (y[1] - x[1]) / (y[2] - x[2] + 1e-9)}'
}
quiet() {
  local end=$((SECONDS + QUIET_WAIT)) b
  while :; do b=$(busy 2); (( b < QUIET || SECONDS >= end )) && break; done
  echo "$b"
}

make -s deps >&2
: >"$tmp/results"
EP=()
for rtt in $RTTS; do
  ours=1
  $GRIDLAB up routed --set rtt="$rtt" --set rate="$RATE" --set loss="$LOSS" >/dev/null
  if [ "${PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
    taskset -a -p 1 "$(python3 -c 'import json; print(json.load(open("/run/gridlab/lab.json"))["emulator_pid"])')" >/dev/null
    EP=(taskset -c 1-$(($(nproc) - 1)))
  fi
  cc=$($GRIDLAB exec a-fe -- sysctl -n net.ipv4.tcp_congestion_control)
  $GRIDLAB exec a-fe -- "${EP[@]}" iperf3 -s -p $IPERF_PORT >"$tmp/iperf3-s.log" 2>&1 & pids+=($!)
  within 10 listening a-fe $IPERF_PORT || die "iperf3 -s did not start: $(tail -5 "$tmp/iperf3-s.log")"
  for setting in $SETTINGS; do
    case $setting in
    new) flags=() ;;
    old) flags=(--trunk-connections 1 --trunk-cc default) ;;
    cubic) flags=(--trunk-cc cubic) ;;
    one) flags=(--trunk-connections 1) ;;
    *) die "unknown setting $setting" ;;
    esac
    hp=()
    $GRIDLAB exec a-fe -- "${EP[@]}" "$GRIDLINK" hub --name a --listen 0.0.0.0:7946 "${flags[@]}" >"$tmp/hub-a-$setting-$rtt.log" 2>&1 & hp+=($!)
    within 10 listening a-fe 7946 || die "hub a did not listen: $(tail -5 "$tmp/hub-a-$setting-$rtt.log")"
    $GRIDLAB exec b-fe -- "${EP[@]}" "$GRIDLINK" hub --name b --listen 0.0.0.0:7946 --peer $A_FE:7946 "${flags[@]}" >"$tmp/hub-b-$setting-$rtt.log" 2>&1 & hp+=($!)
    within 10 listening b-fe 7946 || die "hub b did not listen: $(tail -5 "$tmp/hub-b-$setting-$rtt.log")"
    $GRIDLAB exec b-n1 -- "${EP[@]}" "$GRIDLINK" perf --serve --name b --hub $B_HUB >"$tmp/serve.out" 2>"$tmp/serve-$setting-$rtt.log" & hp+=($!)
    within 20 grep -q listening "$tmp/serve-$setting-$rtt.log" || die "gridlink perf --serve did not start: $(tail -5 "$tmp/serve-$setting-$rtt.log")"
    pids+=("${hp[@]}")
    sleep 3 # the trunk's round trip measured, its further connections dialled
    trunk=$($GRIDLAB exec b-fe -- "$GRIDLINK" status --hub --json 2>/dev/null | python3 -c '
import json, sys
try:
    st = json.load(sys.stdin)
except ValueError:
    print("?"); sys.exit()
for l in st.get("links") or []:
    if l.get("role") == "hub":
        print("%s connection(s), %s" % (l.get("connections") or 1, l.get("congestion") or "?")); break
else:
    print("no trunk")' || echo "?")
    for round in $(seq "$RUNS"); do
      bg=$(quiet)
      out=$($GRIDLAB exec b-fe -- "${EP[@]}" timeout $LIMIT iperf3 -c $A_FE -p $IPERF_PORT -R -J -t "$SECS" -O "$OMIT" -P 8 || true)
      python3 -c '
import json, sys
rtt, setting, rnd, bg, trunk = sys.argv[1:6]
rec = {"rtt": rtt, "setting": setting, "round": int(rnd), "kind": "iperf3-P8", "bg": int(bg), "trunk": trunk}
try:
    rec["mbit"] = json.loads(sys.stdin.read())["end"]["sum_received"]["bits_per_second"] / 1e6
except Exception as e:
    rec["error"] = "iperf3: %s" % e
print(json.dumps(rec))' "$rtt" "$setting" "$round" "$bg" "$trunk" <<<"$out" >>"$tmp/results"
      for s in $STREAMS; do
        bg=$(quiet)
        out=$($GRIDLAB exec a-n1 -- "${EP[@]}" timeout $LIMIT "$GRIDLINK" perf b --hub $A_HUB ${PERF_ARGS:-} --streams "$s" --data random --time $((SECS + OMIT)) --omit "$OMIT" --json 2>>"$tmp/perf.err" || true)
        python3 -c '
import json, sys
rtt, setting, rnd, bg, trunk, s = sys.argv[1:7]
rec = {"rtt": rtt, "setting": setting, "round": int(rnd), "kind": "gridlink-" + s, "bg": int(bg), "trunk": trunk}
try:
    r = json.loads(sys.stdin.read().strip().splitlines()[-1])
    if r.get("error"):
        rec["error"] = r["error"]
    else:
        rec["mbit"] = r["steady_mbit_per_s"]
        rec["from"] = r.get("steady_from") or "sender"
        rec["sent_mbit"] = r.get("sent_steady_mbit_per_s") or r["steady_mbit_per_s"]
        rec["streams"] = r.get("streams")
        rec["method"] = r.get("method")
except Exception as e:
    rec["error"] = "gridlink perf: %s" % e
print(json.dumps(rec))' "$rtt" "$setting" "$round" "$bg" "$trunk" "$s" <<<"$out" >>"$tmp/results"
      done
    done
    for p in "${hp[@]}"; do kill "$p" 2>/dev/null || true; done
    wait "${hp[@]}" 2>/dev/null || true
    sleep 1
  done
  teardown
done

python3 - "$tmp/results" <<PY
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("### Routed at full speed: routed topology, %s, %s loss; kernel default congestion control %s" % ("$RATE", "$LOSS", "$cc"))
print()
print("Rates in Mbit/s of application data received, counted by the receiver, median of $RUNS rounds of $SECS s after $OMIT s of ramp-up; ratios are medians of per-round ratios against iperf3 -P 8 between the two frontends in the same round. sender: what gridlink perf's client handed to the link over its own span (it also counts what the buffers on the way grew by). bg: the machine's busy % before each run (shared machine: rough figures).")
print()
print("| RTT | hub setting | trunk | case | Mbit/s | of iperf3 -P 8 | sender | streams | runs | bg % |")
print("|---|---|---|---|---|---|---|---|---|---|")
for rtt in "$RTTS".split():
    for setting in "$SETTINGS".split():
        rs = [r for r in recs if r["rtt"] == rtt and r["setting"] == setting]
        if not rs:
            continue
        trunk = rs[0].get("trunk", "?")
        base = {r["round"]: r.get("mbit") for r in rs if r["kind"] == "iperf3-P8"}
        for kind in ["iperf3-P8"] + ["gridlink-" + s for s in "$STREAMS".split()]:
            ks = [r for r in rs if r["kind"] == kind]
            vals = [r["mbit"] for r in ks if "mbit" in r]
            ratios = [r["mbit"] / base[r["round"]] for r in ks if "mbit" in r and base.get(r["round"])]
            notes = sorted({r["method"] for r in ks if r.get("method") and r["method"] != "routed"})
            errs = [r["error"] for r in ks if "error" in r]
            streams = sorted({str(r.get("streams")) for r in ks if r.get("streams")})
            sent = [r["sent_mbit"] for r in ks if "sent_mbit" in r]
            froms = {r["from"] for r in ks if "from" in r}
            sender = ("%.1f" % med(sent)) if sent else ""
            if froms - {"receiver"}:
                sender += " (steady counted by the sender: an old server)"
            print("| %s | %s | %s | %s%s | %.1f | %s | %s | %s | %s | %s |" % (rtt, setting, trunk, kind, (" (NOT ROUTED: %s)" % ", ".join(notes)) if notes else "",
                med(vals), ("%.1f%%" % (100 * med(ratios))) if kind != "iperf3-P8" and ratios else "", sender, ",".join(streams),
                " ".join("%.0f" % v for v in vals) + ("; errors: " + "; ".join(e[:80] for e in errs) if errs else ""),
                " ".join(str(r["bg"]) for r in ks)))
PY
