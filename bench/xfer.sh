#!/usr/bin/env bash
# gridlink cp (issue 8), for BENCHMARKS.md (needs root). On the `wan`
# topology (RTT, RATE), with host a's TCP send buffers capped at WMEM bytes
# as an untuned host caps them (see bench/links.sh), a copies to b:
#   one file of SIZE random bytes     gridlink cp        vs scp (OpenSSH)
#   NFILES files of FSIZE bytes       gridlink cp -r     vs scp -r
# scp runs against an sshd this script starts in b with keys it makes
# (and throws away). Times are wall-clock times of the whole command, node
# or ssh setup included; rates are file bytes over them. SCP_SIZE and
# SCP_FILES let scp copy less than gridlink (its rate is steady, window-
# bound: a 1 GiB scp takes ~11 minutes here); the table says when they did,
# and ratios are then of rates (bytes or files per second), not of times.
# Capacity is the TCP payload rate of the link (RATE x (MTU-52)/MTU, see
# bench/links.sh); iperf3 -P CAPCHECK shows what the link delivered in this
# run. Prints markdown.
#
# Everything runs inside lab namespaces; the lab lock of lab tests
# (/run/gridlab/test.lock, see internal/lab/labtest) is held for the whole run, and
# the lab is torn down at the end, also on failure or Ctrl-C.
# Its hubs and nodes run an open grid (no --ca) on purpose: what admission
# by a CA costs is bench/security.sh's to measure.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin xfer "$@"

RTT=${RTT:-40ms}
RATE=${RATE:-400mbit}
WMEM=${WMEM:-65536}
SIZE=${SIZE:-1024}          # MiB, the big file
NFILES=${NFILES:-10000}     # small files,
FSIZE=${FSIZE:-10240}       # of this many bytes each
SCP_SIZE=${SCP_SIZE:-$SIZE} # MiB scp copies of the big file (a prefix of it)
SCP_FILES=${SCP_FILES:-$NFILES}
CAPCHECK=${CAPCHECK:-64}    # iperf3 -P for the capacity check; 0 skips it
GLFLAGS=${GLFLAGS:-}        # extra flags for gridlink cp
A=198.51.100.10 B=198.51.100.26 HUB=198.51.100.10:7946 SSHPORT=2222 IPERF_PORT=5301

chmod 755 "$tmp"
now() { date +%s.%N; }

# the data: one big random file, many small random files
mkdir -p "$tmp/src/many" "$tmp/scp-src/many"
head -c $((SIZE << 20)) /dev/urandom >"$tmp/src/big"
head -c $((SCP_SIZE << 20)) "$tmp/src/big" >"$tmp/scp-src/big"
python3 - "$tmp" "$NFILES" "$FSIZE" "$SCP_FILES" <<'PY'
import os, sys
tmp, n, size, nscp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    b = os.urandom(size)
    open("%s/src/many/f%05d" % (tmp, i), "wb").write(b)
    if i < nscp:
        open("%s/scp-src/many/f%05d" % (tmp, i), "wb").write(b)
PY

# ssh material for scp, this run's own
ssh-keygen -q -t ed25519 -N '' -f "$tmp/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/id"
cp "$tmp/id.pub" "$tmp/authorized_keys"
echo "[$B]:$SSHPORT $(cat "$tmp/host_key.pub")" >"$tmp/known_hosts"
cat >"$tmp/sshd_config" <<CFG
Port $SSHPORT
ListenAddress $B
HostKey $tmp/host_key
AuthorizedKeysFile $tmp/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
PidFile none
Subsystem sftp internal-sftp
CFG
SCP=(scp -q -i "$tmp/id" -o UserKnownHostsFile="$tmp/known_hosts" -o StrictHostKeyChecking=yes -o BatchMode=yes -P $SSHPORT)

ours=1
$GRIDLAB up wan --set rtt="$RTT" --set rate="$RATE" >/dev/null
$GRIDLAB exec a -- sysctl -q -w net.ipv4.tcp_wmem="4096 16384 $WMEM"
mtu=$($GRIDLAB exec a -- cat /sys/class/net/pub/mtu)
$GRIDLAB exec b -- /usr/sbin/sshd -D -f "$tmp/sshd_config" -E "$tmp/sshd.log" & pids+=($!)
$GRIDLAB exec b -- iperf3 -s -p $IPERF_PORT >"$tmp/iperf3-s.log" 2>&1 & pids+=($!)
$GRIDLAB exec a -- "$GRIDLINK" hub --name a --listen 0.0.0.0:7946 >"$tmp/hub.log" 2>&1 & pids+=($!)
within 10 listening a 7946 || die "hub did not listen: $(tail -5 "$tmp/hub.log")"
mkdir -p "$tmp/dst"
$GRIDLAB exec b -- "$GRIDLINK" serve --name b --hub $HUB --root "$tmp/dst" >"$tmp/serve.log" 2>&1 & pids+=($!)
within 20 grep -q serving "$tmp/serve.log" || die "gridlink serve did not start: $(tail -5 "$tmp/serve.log")"
within 10 listening b $SSHPORT || die "sshd did not start: $(tail -5 "$tmp/sshd.log")"
within 10 listening b $IPERF_PORT || die "iperf3 -s did not start"

cap_mbit=""
if (( CAPCHECK > 0 )); then
  cap_mbit=$($GRIDLAB exec a -- iperf3 -c $B -p $IPERF_PORT -J -t 8 -O 2 -P "$CAPCHECK" |
    python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))')
fi

: >"$tmp/results"
# run CASE BYTES FILES COMMAND...: times a copy into a fresh destination
run() {
  local case=$1 bytes=$2 files=$3; shift 3
  rm -rf "$tmp/dst"/* "$tmp/scp-dst"; mkdir -p "$tmp/scp-dst"; sync
  local t0 t1 rc=0
  t0=$(now)
  "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  t1=$(now)
  python3 - "$case" "$bytes" "$files" "$t0" "$t1" "$rc" "$tmp/out" "$tmp/err" >>"$tmp/results" <<'PY'
import json, sys
case, nbytes, files, t0, t1, rc, out, err = sys.argv[1:]
rec = {"case": case, "bytes": int(nbytes), "files": int(files), "secs": float(t1) - float(t0), "rc": int(rc)}
try:
    rec["cp"] = json.loads(open(out).read().strip().splitlines()[-1])
except (ValueError, IndexError):
    pass
if rec["rc"] != 0:
    rec["error"] = (open(err).read() + open(out).read())[-300:]
print(json.dumps(rec))
PY
}
glcp() { $GRIDLAB exec a -- "$GRIDLINK" cp --json --quiet --hub $HUB $GLFLAGS "$@"; }
run gl-big $((SIZE << 20)) 1 glcp "$tmp/src/big" b:
cmp -s "$tmp/src/big" "$tmp/dst/big" || die "gridlink cp's copy of big differs: $(tail -3 "$tmp/err")"
run scp-big $((SCP_SIZE << 20)) 1 $GRIDLAB exec a -- "${SCP[@]}" "$tmp/scp-src/big" "root@$B:$tmp/scp-dst/"
run gl-many $((NFILES * FSIZE)) "$NFILES" glcp -r "$tmp/src/many" b:
diff -rq "$tmp/src/many" "$tmp/dst/many" >/dev/null || die "gridlink cp -r's copy differs: $(tail -3 "$tmp/err")"
run scp-many $((SCP_FILES * FSIZE)) "$SCP_FILES" $GRIDLAB exec a -- "${SCP[@]}" -r "$tmp/scp-src/many" "root@$B:$tmp/scp-dst/"
teardown

python3 - "$tmp/results" <<PY
import json, sys
recs = {r["case"]: r for r in map(json.loads, open(sys.argv[1]))}
rate_s, rtt, wmem, mtu, cap_meas = "$RATE", "$RTT", $WMEM, $mtu, "$cap_mbit"
def parse_rate(s):
    for unit, m in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if s.endswith(unit):
            return float(s[:-len(unit)]) * m / 1e6
    return float(s) / 1e6
cap = parse_rate(rate_s) * (mtu - 52) / mtu
print("### gridlink cp: wan topology, RTT %s, %s, sender's TCP send buffers capped at %d bytes" % (rtt, rate_s, wmem))
print()
print("Capacity %.1f Mbit/s TCP payload (%s x %d/%d)%s. Wall-clock times of whole commands." % (
    cap, rate_s, mtu - 52, mtu, "; iperf3 -P $CAPCHECK measured %s Mbit/s in this run" % cap_meas if cap_meas else ""))
print()
print("| case | data | seconds | Mbit/s | files/s | notes |")
print("|---|---|---|---|---|---|")
def mb(r): return r["bytes"] * 8 / r["secs"] / 1e6
for c, name in (("gl-big", "gridlink cp, one file"), ("scp-big", "scp, one file"), ("gl-many", "gridlink cp -r, small files"), ("scp-many", "scp -r, small files")):
    r = recs.get(c)
    if not r:
        continue
    note = r.get("error", "")
    cp = r.get("cp")
    if cp:
        note = "%s, %s streams, %d files, %d failed, %d attempt(s)" % (cp.get("method"), cp.get("streams"), cp.get("files", 0), cp.get("failed", 0), cp.get("attempts", 0)) + ("; " + cp["failure"] if cp.get("failure") else "")
    print("| %s | %d x %d B | %.2f | %.1f | %.0f | %s |" % (name, r["files"], r["bytes"] // max(r["files"], 1), r["secs"], mb(r), r["files"] / r["secs"], note))
print()
print("| ratio | measured | target |")
print("|---|---|---|")
ok = lambda c: c in recs and recs[c]["rc"] == 0
if ok("gl-big"):
    v = mb(recs["gl-big"]) / cap
    print("| gridlink cp, one file / capacity | **%.1f%%** | ≥ 85%% %s |" % (100 * v, "✓" if v >= 0.85 else "✗"))
if ok("gl-big") and ok("scp-big"):
    v = mb(recs["gl-big"]) / mb(recs["scp-big"])
    print("| gridlink cp / scp, one file (rates) | **%.1fx** | ≥ 5x %s |" % (v, "✓" if v >= 5 else "✗"))
if ok("gl-many") and ok("scp-many"):
    g, s = recs["gl-many"], recs["scp-many"]
    v = (g["files"] / g["secs"]) / (s["files"] / s["secs"])
    print("| gridlink cp -r / scp -r, small files (files per second) | **%.1fx** | ≥ 10x %s |" % (v, "✓" if v >= 10 else "✗"))
print()
print("\`\`\`sh")
print("RTT=%s RATE=%s WMEM=%d SIZE=$SIZE NFILES=$NFILES FSIZE=$FSIZE SCP_SIZE=$SCP_SIZE SCP_FILES=$SCP_FILES bench/xfer.sh" % (rtt, rate_s, wmem))
print("\`\`\`")
PY
