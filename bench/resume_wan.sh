#!/usr/bin/env bash
# What resumability costs on a direct wide-area link (issue 20: "the cost
# of resumability on a direct wan link <= 3% of throughput"), for
# BENCHMARKS.md (needs root). On the `wan` topology (two public hosts, one
# emulated link of RTT, RATE and LOSS), a hub at a and gridlink perf from
# a to b, direct: for each stream count in STREAMS, RUNS rounds of the
# link resumable (the default) and not (--resume-timeout 0), in an order
# that alternates between rounds. Rates are the receiver's steady rate
# (the server's timeline: SECS s after OMIT s of ramp-up); the cost is one
# minus the median of the per-round ratios resumable / not.
#
# Everything runs inside lab namespaces; the lab lock of lab tests is held
# for the whole run (about RUNS x 2 x streams counts x (SECS + OMIT + 3) s)
# and the lab is torn down at the end, also on failure or Ctrl-C.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin resume_wan "$@"

RTT=${RTT:-40ms}
RATE=${RATE:-400mbit}
LOSS=${LOSS:-0.1%}
STREAMS=${STREAMS:-1 8}
SECS=${SECS:-10}
OMIT=${OMIT:-3}
RUNS=${RUNS:-3}
HUB=198.51.100.10:7946
LIMIT=$((SECS + OMIT + 60))

: >"$tmp/results"
ours=1
$GRIDLAB up wan --set rtt="$RTT" --set rate="$RATE" --set loss="$LOSS" >/dev/null
$GRIDLAB exec a -- "$GRIDLINK" hub --name a --listen 0.0.0.0:7946 >"$tmp/hub.log" 2>&1 & pids+=($!)
within 10 listening a 7946 || die "hub did not listen: $(tail -5 "$tmp/hub.log")"
$GRIDLAB exec b -- "$GRIDLINK" perf --serve --name b --hub $HUB >"$tmp/serve.out" 2>"$tmp/serve.log" & pids+=($!)
within 20 grep -q listening "$tmp/serve.log" || die "gridlink perf --serve did not start: $(tail -5 "$tmp/serve.log")"

for round in $(seq "$RUNS"); do
  for s in $STREAMS; do
    cases="resume plain"
    (( round % 2 == 0 )) && cases="plain resume"
    for c in $cases; do
      args=()
      [ "$c" = plain ] && args=(--resume-timeout 0)
      load=$(cut -d' ' -f1 /proc/loadavg)
      out=$($GRIDLAB exec a -- timeout $LIMIT "$GRIDLINK" perf b --hub $HUB "${args[@]}" --streams "$s" --data random \
        --time $((SECS + OMIT)) --omit "$OMIT" --json 2>>"$tmp/perf.err" || true)
      python3 -c '
import json, sys
rnd, s, case, load = sys.argv[1:5]
rec = {"round": int(rnd), "streams": s, "case": case, "load": load}
try:
    r = json.loads(sys.stdin.read().strip().splitlines()[-1])
    if r.get("error"):
        rec["error"] = r["error"]
    else:
        rec.update(mbit=r["steady_mbit_per_s"], sent=r.get("sent_steady_mbit_per_s"), method=r.get("method"),
                   resumable=bool(r.get("resume")), frm=r.get("steady_from"))
except Exception as e:
    rec["error"] = "gridlink perf: %s" % e
print(json.dumps(rec))' "$round" "$s" "$c" "$load" <<<"$out" | tee -a "$tmp/results" >&2
    done
  done
done

python3 - "$tmp/results" <<PY
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("resume_wan: direct link a -> b, RTT $RTT, $RATE, $LOSS loss, $RUNS rounds of $SECS s after $OMIT s, receiver's steady rate")
print()
print("| streams | resumable Mbit/s | not Mbit/s | resumable / not (median of rounds) | cost | per round | loads |")
print("|---|---|---|---|---|---|---|")
for s in "$STREAMS".split():
    rs = [r for r in recs if r["streams"] == s]
    bad = [r for r in rs if "error" in r or r.get("method") != "direct" or r["resumable"] != (r["case"] == "resume")]
    res = {r["round"]: r["mbit"] for r in rs if r["case"] == "resume" and "mbit" in r}
    pl = {r["round"]: r["mbit"] for r in rs if r["case"] == "plain" and "mbit" in r}
    ratios = [res[k] / pl[k] for k in res if pl.get(k)]
    m = med(ratios)
    print("| %s | %.1f | %.1f | %.3f | %.1f%% | %s | %s |%s" % (s, med(list(res.values())), med(list(pl.values())), m, 100 * (1 - m),
        " ".join("%.3f" % x for x in ratios), " ".join(r["load"] for r in rs),
        (" FLAGGED: " + "; ".join("%s/%s: %s" % (r["case"], r["round"], r.get("error") or r.get("method") or "resumable %s" % r.get("resumable")) for r in bad)) if bad else ""))
PY
