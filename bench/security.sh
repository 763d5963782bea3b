#!/usr/bin/env bash
# The cost of security (issue 6), for BENCHMARKS.md (needs root): an open
# grid (no --ca: every connection is still TLS 1.3 and proves both ends'
# keys, but any key may attach) against the same grid with admission by a
# CA (hubs and nodes certified; every handshake validates the peer's chain
# and the revocation list, and sends a verdict).
#  1. Connection setup on grid6 (factor 0.1): `gridlab matrix grid6 --json
#     --open` and `gridlab matrix grid6 --json` (the lab CA), alternating,
#     RUNS times each in one lab. Per pair the uncached setup time (first)
#     and the median of four cached ones; per method (direct, reverse,
#     splice, routed) the medians and the median of per-pair ratios CA /
#     open of the same round.
#  2. One-stream throughput on `wan` (RTT, RATE): two grids side by side in
#     one lab, open (hub on a:7946) and admitted (hub on a:7947, a CA made
#     with `gridlink ca init`, certificates with `gridlink cert issue`),
#     each with a perf server on b; `gridlink perf --streams 1` (random
#     data, no compression, TLS) to each in turn, RUNS rounds, the order
#     swapped every round: the rate after OMIT s of SECS, and the perf
#     link's setup time from a fresh client node.
#  0. CPU per handshake, no network: BenchmarkHandshakeAdmission (package
#     pki), open, CA-admitted and a user's proxy, alternating, HANDSHAKES x
#     150 handshakes over loopback.
# Prints markdown. Everything runs inside lab namespaces; the lab lock of lab
# tests (/run/gridlab/test.lock) is held for the whole run (about 1.5
# minutes a round: 5 with the defaults), and the lab is torn down at the
# end, also on failure.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin security "$@"

RUNS=${RUNS:-3}
RTT=${RTT:-20ms}
RATE=${RATE:-400mbit}
SECS=${SECS:-10}   # whole seconds per perf run, including
OMIT=${OMIT:-2}    # OMIT seconds of ramp-up not counted
HUB_OPEN=198.51.100.10:7946 HUB_CA=198.51.100.10:7947 # wan: host a
HANDSHAKES=${HANDSHAKES:-20}
load_before=$(uptime | sed 's/.*load average/load average/')

# 0. handshake CPU
go test -run '^$' -bench HandshakeAdmission -benchtime "${HANDSHAKES}x" -count 1 ./pki/ >"$tmp/handshake" 2>&1 || die "BenchmarkHandshakeAdmission: $(tail -5 "$tmp/handshake")"

# 1. setup times on grid6
$GRIDLAB down >/dev/null 2>&1 || true
ours=1
$GRIDLAB up grid6 >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; die "gridlab up grid6 failed"; }
for r in $(seq "$RUNS"); do
  for mode in open ca; do
    flag=; [ "$mode" = open ] && flag=--open
    $GRIDLAB matrix grid6 --json $flag >"$tmp/matrix-$mode-$r.json" 2>"$tmp/matrix.err" || die "matrix $mode: $(tail -5 "$tmp/matrix.err")"
    echo "grid6 round $r $mode: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"])' "$tmp/matrix-$mode-$r.json")" >&2
  done
done
teardown

# 2. one-stream throughput on wan
ours=1
$GRIDLAB up wan --set rtt="$RTT" --set rate="$RATE" >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; die "gridlab up wan failed"; }
"$GRIDLINK" ca init --dir "$tmp/ca" --name bench --no-passphrase >/dev/null
issue() { # ROLE NAME: a new key and certificate; prints their flags
  "$GRIDLINK" cert issue --dir "$tmp/ca" --role "$1" --name "$2" --key "$tmp/ca/$2.key" --out "$tmp/ca/$2.pem" >/dev/null
  echo --ca "$tmp/ca/ca.pem" --crl "$tmp/ca/crl.pem" --key "$tmp/ca/$2.key" --cert "$tmp/ca/$2.pem"
}
bg() { # HOST LOG COMMAND...
  local h=$1 log=$2; shift 2
  $GRIDLAB exec "$h" -- "$@" >"$tmp/$log.log" 2>&1 &
  pids+=($!)
}
bg a hub-open "$GRIDLINK" hub --name a --listen 0.0.0.0:7946
bg a hub-ca "$GRIDLINK" hub --name a --listen 0.0.0.0:7947 --control @hub-ca $(issue hub a)
within 10 listening a 7946 || die "hub (open): $(tail -3 "$tmp/hub-open.log")"
within 10 listening a 7947 || die "hub (CA): $(tail -3 "$tmp/hub-ca.log")"
bg b perf-open "$GRIDLINK" perf --serve --name b --hub $HUB_OPEN --port 5201
bg b perf-ca "$GRIDLINK" perf --serve --name b --hub $HUB_CA --port 5202 $(issue node b)
within 20 grep -q listening "$tmp/perf-open.log" || die "perf server (open): $(tail -3 "$tmp"/hub-open.log "$tmp/perf-open.log")"
within 20 grep -q listening "$tmp/perf-ca.log" || die "perf server (CA): $(tail -3 "$tmp"/hub-ca.log "$tmp/perf-ca.log")"
: >"$tmp/perf"
perf() { # MODE ROUND
  local args=(--hub $HUB_OPEN b:5201) out
  [ "$1" = ca ] && args=(--hub $HUB_CA b:5202 $(issue node "client-$2"))
  out=$($GRIDLAB exec a -- timeout $((SECS + 60)) "$GRIDLINK" perf "${args[@]}" --streams 1 --data random --compress off \
    --time "$SECS" --omit "$OMIT" --json) || die "perf $1: $out"
  echo "$1 $2 $out" >>"$tmp/perf"
}
for r in $(seq "$RUNS"); do
  if (( r % 2 )); then perf open "$r"; perf ca "$r"; else perf ca "$r"; perf open "$r"; fi
  echo "wan round $r done" >&2
done
teardown
load_after=$(uptime | sed 's/.*load average/load average/')

python3 - "$tmp" "$RUNS" <<PY
import glob, json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
med = lambda xs: statistics.median(xs) if xs else float("nan")
pct = lambda x: "%.1f%%" % (100 * x)
print("### The cost of security: open grid vs admission by a CA")
print()
print("Machine load: before the run %s, after %s. %d rounds, open and CA-admitted alternating in one lab; ratios are CA / open, medians of per-pair (setup) or per-round (throughput) ratios." % ("$load_before", "$load_after", runs))
print()
print("#### CPU per handshake, loopback, \`BenchmarkHandshakeAdmission\` (package pki)")
print()
line = next((l for l in open(tmp + "/handshake") if l.startswith("BenchmarkHandshakeAdmission")), "")
f = line.split()
metric = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1) if f[i + 1].endswith(("handshake", "/open"))}
print("| handshake | µs | **ratio to open** |")
print("|---|---|---|")
for m, name in (("open", "open grid (self-signed, keys proved)"), ("ca", "CA-admitted nodes (chains and revocation checked both ways)"), ("proxy", "a user's proxy dialling a CA-admitted node")):
    us = metric.get(m + "-µs/handshake")
    print("| %s | %s | %s |" % (name, "%.0f" % us if us else "?", "1" if m == "open" else "**%.3f**" % metric.get(m + "/open", float("nan"))))
print()
print("#### Connection setup, grid6 (factor 0.1), \`gridlab matrix\`")
print()
pairs = {}  # (src, dst) -> mode -> round -> gridlink result
for f in glob.glob(tmp + "/matrix-*.json"):
    mode, rnd = f.rsplit("/", 1)[1][len("matrix-"):-len(".json")].split("-")
    for p in json.load(open(f))["pairs"]:
        pairs.setdefault((p["src"], p["dst"]), {}).setdefault(mode, {})[int(rnd)] = p.get("gridlink") or {}
rows, mismatch, failed = {}, [], []
for key, modes in sorted(pairs.items()):
    for rnd in range(1, runs + 1):
        o, c = modes.get("open", {}).get(rnd, {}), modes.get("ca", {}).get(rnd, {})
        if not (o.get("ok") and c.get("ok")):
            failed.append("%s->%s round %d (%s)" % (key[0], key[1], rnd, "; ".join("%s: %s" % (m, r.get("error", "?")) for m, r in (("open", o), ("CA", c)) if not r.get("ok"))))
            continue
        if o["method"] != c["method"]:
            mismatch.append("%s->%s round %d: %s open, %s CA" % (key[0], key[1], rnd, o["method"], c["method"]))
            continue
        r = rows.setdefault(o["method"], {"pairs": set(), "fo": [], "fc": [], "co": [], "cc": [], "fr": [], "cr": []})
        r["pairs"].add(key)
        r["fo"].append(o["first_ms"]); r["fc"].append(c["first_ms"]); r["fr"].append(c["first_ms"] / o["first_ms"])
        r["co"].append(o["cached_ms"]); r["cc"].append(c["cached_ms"]); r["cr"].append(c["cached_ms"] / o["cached_ms"])
print("| method | pairs | first, open (ms) | first, CA (ms) | **first CA / open** | cached, open (ms) | cached, CA (ms) | **cached CA / open** |")
print("|---|---|---|---|---|---|---|---|")
allf, allc = [], []
for m in ("direct", "reverse", "splice", "routed"):
    if m not in rows:
        continue
    r = rows[m]
    allf += r["fr"]; allc += r["cr"]
    print("| %s | %d | %.1f | %.1f | **%.3f** | %.1f | %.1f | **%.3f** |" % (m, len(r["pairs"]), med(r["fo"]), med(r["fc"]), med(r["fr"]), med(r["co"]), med(r["cc"]), med(r["cr"])))
print("| all | %d | | | **%.3f** | | | **%.3f** |" % (sum(len(r["pairs"]) for r in rows.values()), med(allf), med(allc)))
print()
if mismatch:
    print("Left out, the methods differing between open and CA: %s." % "; ".join(mismatch))
if failed:
    print("Left out, where a run did not connect: %s." % "; ".join(failed))
print()
print("#### One stream, wan (RTT $RTT, $RATE), \`gridlink perf --streams 1\`")
print()
res = {}
for line in open(tmp + "/perf"):
    mode, rnd, js = line.split(" ", 2)
    res.setdefault(mode, {})[int(rnd)] = json.loads(js)
def col(mode, k):
    return [res.get(mode, {}).get(r, {}).get(k) for r in range(1, runs + 1)]
def ratios(k):
    return [c / o for o, c in zip(col("open", k), col("ca", k)) if o and c]
print("| | open | CA | **CA / open** |")
print("|---|---|---|---|")
for k, name in (("steady_mbit_per_s", "Mbit/s after %s s ramp-up" % "$OMIT"), ("setup_ms", "perf link setup from a fresh node (ms)")):
    o, c = [x for x in col("open", k) if x], [x for x in col("ca", k) if x]
    print("| %s | %.1f (%s) | %.1f (%s) | **%.3f** |" % (name, med(o), " ".join("%.1f" % x for x in o), med(c), " ".join("%.1f" % x for x in c), med(ratios(k))))
methods = sorted({r.get("method", "?") for m in res.values() for r in m.values()})
print()
print("perf runs: method %s, one TLS stream, random data, no compression." % ", ".join(methods))
print()
print("\`\`\`sh")
print("RUNS=%d RTT=$RTT RATE=$RATE SECS=$SECS OMIT=$OMIT HANDSHAKES=$HANDSHAKES bench/security.sh" % runs)
print("\`\`\`")
PY
