#!/usr/bin/env bash
# Fast links (issue 5), for BENCHMARKS.md (needs root). On the `wan`
# topology, once per loss rate in LOSSES, with the sender's (host a) TCP send
# buffers capped at WMEM bytes the way an untuned host caps them (the
# namespace's net.ipv4.tcp_wmem maximum: autotuning never grows a socket's
# buffer past it, for iperf3 and gridlink alike, with no flag of either;
# net.core.wmem_max is not per namespace, so a socket that sets SO_SNDBUF
# would escape the cap: the table shows the largest send buffer seen).
# Congestion control is the kernel's default (bbr here); a lab namespace may
# only pick one of net.ipv4.tcp_allowed_congestion_control (reno, bbr).
#   iperf3 -P 1                          a single TCP stream (the problem)
#   gridlink perf --streams 1            the same through gridlink
#   gridlink perf --streams auto         N streams, chosen by gridlink
#   iperf3 -P N                          the same N, plain TCP
#   gridlink perf --data text   --compress auto
#   gridlink perf --data random --compress auto / --compress off
# RUNS rounds of these, baseline and gridlink runs alternating; every rate is
# the received application rate after the first OMIT seconds (ramp-up) over
# SECS seconds. Prints markdown: medians, per-run values and the ratios the
# issue asks for, each against a baseline of the same round.
#
# Capacity is the TCP payload rate the link can carry: RATE counts IP packets
# (internal/lab/wan), so a full-sized segment carries MTU-52 bytes of payload in MTU
# bytes on the link (IPv4 20 + TCP 20 + timestamps 12): 386.1 Mbit/s at
# 400mbit; iperf3 with 48 or more capped streams measures 383-386. iperf3
# -P CAPCHECK (once per loss) shows what the link delivered in this run; far
# below capacity means a loaded machine: the emulator alone needs ~0.8 of a
# vCPU at 400 Mbit/s, and when other work starves it, TCP stalls.
#
# Everything runs inside lab namespaces; the lab lock of lab tests
# (/run/gridlab/test.lock, see internal/lab/labtest) is held for the whole run (about
# 12 minutes with the defaults), and the lab is torn down at the end, also
# on failure or Ctrl-C.
# Its hubs and nodes run an open grid (no --ca) on purpose: what admission
# by a CA costs is bench/security.sh's to measure.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin links "$@"

RTT=${RTT:-40ms}
RATE=${RATE:-400mbit}
LOSSES=${LOSSES:-0 0.1%}
WMEM=${WMEM:-65536}
SECS=${SECS:-10}          # whole seconds measured per run,
OMIT=${OMIT:-3}           # after OMIT whole seconds of ramp-up
RUNS=${RUNS:-3}
CAPCHECK=${CAPCHECK:-64}  # iperf3 -P for the capacity check; 0 skips it
GLFLAGS=${GLFLAGS:-}      # extra flags for every gridlink perf client run
QUIET=${QUIET:-15}        # before each run, wait until the machine is under QUIET% busy over 2 s,
QUIET_WAIT=${QUIET_WAIT:-300} # for at most QUIET_WAIT s (other work starves the emulator: stalls, losses)
A=198.51.100.10 B=198.51.100.26 HUB=198.51.100.10:7946 IPERF_PORT=5301 # wan: a and b
LIMIT=$((SECS + OMIT + 60)) # a client run that takes longer is stopped and counted as failed

cpu() { head -1 /proc/stat | awk '{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9, $9}'; }
busy() { # machine CPU busy % over $1 s
  local a b; a=$(cpu); sleep "$1"; b=$(cpu)
  awk -v a="$a" -v b="$b" 'BEGIN {split(a, x); split(b, y); printf "%d", 100 * (y[1] - x[1]) / (y[2] - x[2] + 1e-9)}'
}
ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat" 2>/dev/null || echo 0; }
quiet() { # waits for a quiet machine (see QUIET) and prints the last busy %
  local end=$((SECONDS + QUIET_WAIT)) b
  while :; do b=$(busy 2); (( b < QUIET || SECONDS >= end )) && break; done
  echo "$b"
}

# sample PREFIX: while a run lasts, the largest send buffer (skmem tb) and the
# most connections of host a to b, every second
sample() {
  local tb=0 n=0
  while :; do
    local s; s=$($GRIDLAB exec a -- ss -Htmn state established dst "$B" 2>/dev/null || true)
    local c; c=$(grep -c 'tb[0-9]' <<<"$s" || true)
    local m; m=$( (grep -o 'tb[0-9]*' <<<"$s" || true) | tr -d tb | sort -n | tail -1)
    (( c > n )) && n=$c
    (( ${m:-0} > tb )) && tb=${m:-0}
    echo "$tb $n" >"$1.sock"
    sleep 1
  done
}

# record LOSS CASE ROUND KIND OUTFILE SERVERPID COMMAND...: runs one
# measurement with the sampler and appends a JSON line (kind iperf3 or
# gridlink, its result, CPU of the machine, of the client (sender), the
# server (receiver) and the emulator, socket figures) to $tmp/results
record() {
  local loss=$1 case=$2 round=$3 kind=$4 out=$5 spid=$6; shift 6
  local c0 c1 bg t0 t1 e0 e1 rc=0
  bg=$(quiet)
  rm -f "$tmp/s.sock"
  sample "$tmp/s" & local sp=$!
  c0=$(cpu) t0=$(ticks "$spid") e0=$(ticks "$emu")
  { time "$@" >"$out" 2>"$out.err"; } 2>"$out.time" || rc=$?
  c1=$(cpu) t1=$(ticks "$spid") e1=$(ticks "$emu")
  kill "$sp"; wait "$sp" 2>/dev/null || true
  python3 - "$loss" "$case" "$round" "$kind" "$out" "$rc" "$c0" "$c1" "$(cat "$tmp/s.sock" 2>/dev/null || echo 0 0)" "$bg" \
    "$(tail -1 "$out.time")" "$((t1 - t0)) $((e1 - e0)) $(getconf CLK_TCK)" >>"$tmp/results" <<'PY'
import json, sys
loss, case, rnd, kind, out, rc, c0, c1, sock, bg, times, ticks = sys.argv[1:]
b0, t0, s0 = map(int, c0.split()); b1, t1, s1 = map(int, c1.split())
tb, conns = map(int, sock.split())
# (no time line: the run was cut short; its CPU is then not known)
real, user, sys_ = map(float, times.split()) if len(times.split()) == 3 else (float("nan"), 0.0, 0.0)
srv, emu, hz = map(int, ticks.split())
raw = open(out).read()
rec = {"loss": loss, "case": case, "round": int(rnd), "kind": kind, "cpu": 100 * (b1 - b0) / max(t1 - t0, 1),
       "steal": 100 * (s1 - s0) / max(t1 - t0, 1), "max_tb": tb, "conns": conns, "bg": int(bg),
       "cpu_client": 100 * (user + sys_) / real, "cpu_server": 100 * srv / hz / real, "cpu_emu": 100 * emu / hz / real}
try:
    r = json.loads(raw)
except ValueError:
    r = {"error": "exit status %s, no JSON: %s %s" % (rc, raw[-300:], open(out + ".err").read()[-300:])}
if kind == "iperf3":
    if "error" in r:
        rec["error"] = r["error"]
    else:
        rec["mbit"] = r["end"]["sum_received"]["bits_per_second"] / 1e6
        rec["streams"] = r["start"]["test_start"]["num_streams"]
        rec["retransmits"] = r["end"]["sum_sent"].get("retransmits")
else:
    if r.get("error"):
        rec["error"] = r["error"]
    else:
        rec["mbit"] = r["steady_mbit_per_s"]
        rec["whole_mbit"] = r.get("mbit_per_s")
        rec["wire_mbit"] = r.get("wire_mbit_per_s")
        for k in ("streams", "compress", "encrypt", "data", "method"):
            rec[k] = r.get(k)
print(json.dumps(rec))
if "error" in rec:
    print("links.sh: %s %s round %s: %s" % (loss, case, rnd, rec["error"]), file=sys.stderr)
PY
}

TIMEFORMAT='%R %U %S'
iperf() { $GRIDLAB exec a -- timeout $LIMIT iperf3 -c "$B" -p $IPERF_PORT -J -t "$SECS" -O "$OMIT" -P "$1"; }
# gridlink's --time counts the ramp-up (--omit) in, iperf3's -t does not
glperf() { $GRIDLAB exec a -- timeout $LIMIT "$GRIDLINK" perf b --hub $HUB --time $((SECS + OMIT)) --omit "$OMIT" --json $GLFLAGS "$@"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1]).get(sys.argv[1]) or "")' "$1" <"$tmp/results"; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$tmp/results"
for loss in $LOSSES; do
  ours=1
  $GRIDLAB up wan --set rtt="$RTT" --set rate="$RATE" --set loss="$loss" >/dev/null
  $GRIDLAB exec a -- sysctl -q -w net.ipv4.tcp_wmem="4096 16384 $WMEM"
  mtu=$($GRIDLAB exec a -- cat /sys/class/net/pub/mtu)
  cc=$($GRIDLAB exec a -- sysctl -n net.ipv4.tcp_congestion_control)
  ts=$($GRIDLAB exec a -- sysctl -n net.ipv4.tcp_timestamps)
  echo "$loss $mtu $cc $(( ts > 0 ? 52 : 40 ))" >>"$tmp/labs"

  emu=$(python3 -c 'import json; print(json.load(open("/run/gridlab/lab.json"))["emulator_pid"])')
  $GRIDLAB exec b -- iperf3 -s -p $IPERF_PORT >"$tmp/iperf3-s.log" 2>&1 & ipid=$!; pids+=($!)
  $GRIDLAB exec a -- "$GRIDLINK" hub --name a --listen 0.0.0.0:7946 >"$tmp/hub.log" 2>&1 & pids+=($!)
  within 10 listening a 7946 || die "hub did not listen: $(tail -5 "$tmp/hub.log")"
  $GRIDLAB exec b -- "$GRIDLINK" perf --serve --name b --hub $HUB >"$tmp/serve.out" 2>"$tmp/serve.log" & gpid=$!; pids+=($!)
  within 20 grep -q listening "$tmp/serve.log" || die "gridlink perf --serve did not start: $(tail -5 "$tmp/serve.log")"
  within 10 listening b $IPERF_PORT || die "iperf3 -s did not start: $(tail -5 "$tmp/iperf3-s.log")"

  if (( CAPCHECK > 0 )); then
    record "$loss" capcheck 0 iperf3 "$tmp/out" "$ipid" iperf "$CAPCHECK"
  fi
  for round in $(seq "$RUNS"); do
    record "$loss" iperf1 "$round" iperf3 "$tmp/out" "$ipid" iperf 1
    record "$loss" gl1 "$round" gridlink "$tmp/out" "$gpid" glperf --streams 1 --data random --compress off
    record "$loss" glauto "$round" gridlink "$tmp/out" "$gpid" glperf --streams auto --data random --compress off
    n=$(field streams)
    if [ -n "$n" ]; then record "$loss" iperfN "$round" iperf3 "$tmp/out" "$ipid" iperf "$n"
    else echo "links.sh: $loss round $round: no stream count from --streams auto, no iperf3 -P N" >&2; fi
    record "$loss" text "$round" gridlink "$tmp/out" "$gpid" glperf --streams auto --data text --compress auto
    record "$loss" randauto "$round" gridlink "$tmp/out" "$gpid" glperf --streams auto --data random --compress auto
    record "$loss" randoff "$round" gridlink "$tmp/out" "$gpid" glperf --streams auto --data random --compress off
  done
  teardown
done

python3 - "$tmp/results" "$tmp/labs" <<PY
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
labs = {l.split()[0]: l.split()[1:] for l in open(sys.argv[2])}
rtt, rate_s, wmem, secs, omit, runs = "$RTT", "$RATE", $WMEM, $SECS, $OMIT, $RUNS
def parse_rate(s):
    s = s.lower()
    for unit, m in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1), ("", 1)):
        if s.endswith(unit):
            return float(s[:len(s) - len(unit)]) * m / 1e6
rate = parse_rate(rate_s)
med = lambda xs: statistics.median(xs) if xs else float("nan")
pct = lambda x: "%.1f%%" % (100 * x)
print("### Fast links: wan topology, RTT %s, %s, sender's TCP send buffers capped at %d bytes" % (rtt, rate_s, wmem))
print()
print("Machine load before the run: %s. Rates in Mbit/s of application data received, median of %d rounds of %d s after %d s of ramp-up; baseline and gridlink runs alternate, ratios are medians of per-round ratios." % ("$load_before", runs, secs, omit))
for loss, (mtu, cc, hdr) in labs.items():
    mtu, hdr = int(mtu), int(hdr)
    cap = rate * (mtu - hdr) / mtu
    rs = [r for r in recs if r["loss"] == loss]
    by = lambda c: sorted((r for r in rs if r["case"] == c), key=lambda r: r["round"])
    val = lambda c: [r["mbit"] for r in by(c) if "mbit" in r]
    def paired(num, den):
        d = {r["round"]: r.get("mbit") for r in by(den)}
        return [r["mbit"] / d[r["round"]] for r in by(num) if r.get("mbit") and d.get(r["round"])]
    print()
    print("#### loss %s (congestion control %s, MTU %d): capacity %.1f Mbit/s TCP payload (%s x %d/%d)" % (loss, cc, mtu, cap, rate_s, mtu - hdr, mtu))
    print()
    print("| case | Mbit/s | runs | streams | wire Mbit/s | machine CPU | sender / receiver / emulator CPU | largest send buffer | connections |")
    print("|---|---|---|---|---|---|---|---|---|")
    names = [("capcheck", "iperf3 -P %s (capacity check)" % "$CAPCHECK"), ("iperf1", "iperf3 -P 1"),
             ("gl1", "gridlink --streams 1"), ("glauto", "gridlink --streams auto"), ("iperfN", "iperf3 -P N (N of the same round)"),
             ("text", "gridlink --data text --compress auto"), ("randauto", "gridlink --data random --compress auto"),
             ("randoff", "gridlink --data random --compress off")]
    for c, name in names:
        xs = by(c)
        if not xs:
            continue
        errs = [r["error"] for r in xs if "error" in r]
        streams = sorted({r["streams"] for r in xs if r.get("streams") is not None})
        wire = [r["wire_mbit"] for r in xs if r.get("wire_mbit")]
        print("| %s | %s | %s | %s | %s | %.0f%% | %.0f / %.0f / %.0f%% | %d B | %d |" % (name, "%.1f" % med(val(c)) if val(c) else "error: " + errs[0],
              " ".join("%.1f" % v for v in val(c)), ",".join(map(str, streams)), "%.1f" % med(wire) if wire else "",
              med([r["cpu"] for r in xs]), med([r["cpu_client"] for r in xs]), med([r["cpu_server"] for r in xs]), med([r["cpu_emu"] for r in xs]),
              max(r["max_tb"] for r in xs), max(r["conns"] for r in xs)))
    print()
    bgs = [r["bg"] for r in rs]
    print("Machine CPU: busy share of the 2 vCPUs that emulator, sender and receiver share, during the run; before each run the machine was at most %d%% busy (QUIET=%d%%)%s."
          " Sender, receiver, emulator: CPU time of the client, server and emulator processes during the run, in %% of one vCPU."
          " Largest send buffer: skmem tb of host a's TCP connections to b, sampled every second; connections: the most at once (data, control and hub links)." % (
          max(bgs), $QUIET, "; **the machine was busy with other work, the figures are suspect**" if max(bgs) >= $QUIET else ""))
    gl = [r for r in rs if r["kind"] == "gridlink" and "mbit" in r]
    if gl:
        print()
        onoff = lambda v: {True: "on", False: "off"}.get(v, str(v))
        print("gridlink runs: connection method %s, encryption %s." % (
            ",".join(sorted({str(r.get("method")) for r in gl})), ",".join(sorted({onoff(r.get("encrypt")) for r in gl}))))
    print()
    print("| ratio | measured | target |")
    print("|---|---|---|")
    def row(what, xs, ok, target):
        if not xs:
            print("| %s | no data | %s |" % (what, target)); return
        m = med(xs)
        print("| %s | **%s** (%s) | %s %s |" % (what, pct(m), " ".join(pct(x) for x in xs), target, "✓" if ok(m) else "✗"))
    row("iperf3 -P 1 / capacity", [v / cap for v in val("iperf1")], lambda m: m <= 0.15, "≤ 15%")
    row("gridlink --streams 1 / capacity", [v / cap for v in val("gl1")], lambda m: m <= 0.15, "≤ 15%")
    row("gridlink --streams auto / capacity", [v / cap for v in val("glauto")], lambda m: m >= 0.90, "≥ 90%")
    row("gridlink --streams auto / iperf3 -P N", paired("glauto", "iperfN"), lambda m: m >= 0.95, "≥ 95%")
    row("text, compress auto / link rate %s" % rate_s, [v / rate for v in val("text")], lambda m: m >= 2, "≥ 200%")
    row("random, compress auto / compress off", paired("randauto", "randoff"), lambda m: m >= 0.95, "≥ 95%")
    big = [r for r in rs if r["max_tb"] > wmem]
    if big:
        print()
        print("**Send buffer above the cap** in %s: the cap did not hold (a socket set SO_SNDBUF?)." % ", ".join(sorted({r["case"] for r in big})))
print()
print("\`\`\`sh")
print("RTT=%s RATE=%s LOSSES='%s' WMEM=%d SECS=%d OMIT=%d RUNS=%d CAPCHECK=%s%s bench/links.sh" % (rtt, rate_s, "$LOSSES", wmem, secs, omit, runs, "$CAPCHECK", " GLFLAGS='$GLFLAGS'" if "$GLFLAGS" else ""))
print("\`\`\`")
PY
