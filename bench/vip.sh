#!/usr/bin/env bash
# Virtual IP network (issue 19): the baselines gridlink's virtual network
# must beat, for BENCHMARKS.md (needs root). Between two hosts, a (sender)
# and b, in three places, one after another:
#   veth   two namespaces joined by a veth pair, no emulator: the issue's
#          "plain veth" reference
#   clean  the `wan` topology with rtt=0, rate=0 (unlimited), no loss: two lab
#          hosts across the link emulator
#   wan    the `wan` topology at RTT, RATE and LOSS (40 ms, 400 Mbit/s, 0.1%)
# and in each, over these paths from a to b:
#   plain      iperf3 and ping to b's own address, no tunnel
#   wireguard  wireguard-go (userspace WireGuard, a kernel TUN in each
#              namespace, its TSO/GRO offloads): keys made here (openssl
#              X25519), configured through its UAPI socket (no `wg` tool)
#   nebula     Nebula: a CA and host certificates made by nebula-cert, host a
#              is the lighthouse, b finds a through it (static_host_map)
#   gridlink   gridlink vip: not built yet (the slot is start_gridlink below)
# Each tunnel runs at its own defaults (MTU: wireguard-go 1420, Nebula
# 1300; Nebula's one routine) with a firewall that lets everything through.
# For every number of flows in FLOWS: RUNS rounds, each running iperf3 -P
# FLOWS once over every path (the paths alternate, the first one rotates
# from round to round); rates are the received rate after OMIT s of ramp-up
# over SECS s; ratios are medians of per-round ratios against the plain path
# of the same round (against the plain veth: ratios of medians). Ping: PINGS
# probes every PING_INTERVAL s over each path, no other traffic.
#
# It installs what it measures: iperf3 from Debian's packages (`make deps`),
# wireguard-go and Nebula with `go install` at the pinned versions below
# into its scratch directory (GOBIN; nothing system-wide).
#
# With PIN=1 (the default on 2+ CPUs) the link emulator gets CPU 0 and every
# endpoint (iperf3, wireguard-go, Nebula, both hosts) the other CPUs, as in
# bench/lab.sh; the veth runs pin the endpoints the same way.
#
# Everything runs inside lab namespaces (the veth pair's are gl-vb-a and
# gl-vb-b, so `gridlab down` removes them too); the lab lock of lab tests
# (/run/gridlab/test.lock, see internal/lab/labtest) is held for the whole
# run (about 15 minutes with the defaults), and everything is torn down at
# the end, also on failure or Ctrl-C.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin vip "$@"

RTT=${RTT:-40ms}
RATE=${RATE:-400mbit}
LOSS=${LOSS:-0.1%}
FLOWS=${FLOWS:-1 8}        # iperf3 -P, the same for every path
SECS=${SECS:-10}           # whole seconds measured per run,
OMIT=${OMIT:-2}            # after OMIT whole seconds of ramp-up
RUNS=${RUNS:-3}
PINGS=${PINGS:-30}
PING_INTERVAL=${PING_INTERVAL:-0.1}
PHASES=${PHASES:-veth clean wan}
PATHS=${PATHS:-plain wireguard nebula}
# wireguard-go: the module is golang.zx2c4.com/wireguard (no tags the module
# proxy accepts); this is the commit whose tun package gridlink's `tun` uses
# (go.mod), wireguard-go 0.0.20250522.
WG_VERSION=${WG_VERSION:-v0.0.0-20260522210424-ecfc5a8d5446}
NEBULA_VERSION=${NEBULA_VERSION:-v1.12.0}
A=198.51.100.10 B=198.51.100.26 IPERF_PORT=5301 # wan: a and b; the veth pair uses the same
WG_A=100.64.1.1 WG_B=100.64.1.2 NEB_A=100.64.2.1 NEB_B=100.64.2.2
LIMIT=$((SECS + OMIT + 60)) # a client run that takes longer is stopped and counted as failed

trap 'teardown; rm -f /var/run/wireguard/wg-a.sock /var/run/wireguard/wg-b.sock; rm -rf "$tmp"' EXIT

# --- what it measures, installed at pinned versions ---
make -s deps >&2
export GOBIN=$tmp/gobin
(cd "$tmp" && go install "golang.zx2c4.com/wireguard@$WG_VERSION") || die "go install wireguard-go $WG_VERSION failed"
(cd "$tmp" && go install "github.com/slackhq/nebula/cmd/nebula@$NEBULA_VERSION" "github.com/slackhq/nebula/cmd/nebula-cert@$NEBULA_VERSION") ||
  die "go install nebula $NEBULA_VERSION failed"
WG=$GOBIN/wireguard NEBULA=$GOBIN/nebula NEBULA_CERT=$GOBIN/nebula-cert
iperf_version=$(dpkg-query -W -f='${Version}' iperf3)
wg_banner=$("$WG" --version | head -1)

EP=()
if [ "${PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ]; then EP=(taskset -c "1-$(($(nproc) - 1))"); fi
on() { local ns=$1; shift; ip netns exec "$ns" "$@"; }          # NS COMMAND...
onp() { local ns=$1; shift; ip netns exec "$ns" "${EP[@]}" "$@"; } # the same, on the endpoints' CPUs
bgon() { # NS LOG COMMAND...: runs COMMAND in NS in the background, pinned; its pid in $bgpid
  local ns=$1 log=$2; shift 2
  onp "$ns" "$@" >"$tmp/$log.log" 2>&1 &
  bgpid=$!; pids+=("$bgpid") # ip netns exec and taskset exec: the command's own pid
}
listening() { on "$1" ss -Hltn "sport = :$2" | grep -q .; } # NS PORT
bound_udp() { on "$1" ss -Hlun "sport = :$2" | grep -q .; }  # NS PORT
pings() { on "$NSA" ping -c 1 -W 1 "$1" >/dev/null 2>&1; }
cpu() { head -1 /proc/stat | awk '{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}'; }
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t; }

# --- the paths: each start_PATH sets PEER[PATH] (b's address on it) and
# DAEMONS[PATH] (the pids whose CPU is the path's cost) ---
declare -A PEER DAEMONS IFACE
start_plain() { PEER[plain]=$B DAEMONS[plain]= IFACE[plain]=$UNDERLAY_DEV; }

wgkey() { # NAME: $tmp/wg/NAME.key and NAME.pub, hex as the UAPI wants them
  openssl genpkey -algorithm X25519 -out "$tmp/wg/$1.pem" 2>/dev/null
  openssl pkey -in "$tmp/wg/$1.pem" -outform DER | tail -c 32 | od -An -v -tx1 | tr -d ' \n' >"$tmp/wg/$1.key"
  openssl pkey -in "$tmp/wg/$1.pem" -pubout -outform DER | tail -c 32 | od -An -v -tx1 | tr -d ' \n' >"$tmp/wg/$1.pub"
}
uapi_set() { # NS SOCKET: sends stdin, a UAPI set operation, to wireguard-go
  on "$1" python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read())
r = b""
while not r.endswith(b"\n\n"):
    c = s.recv(4096)
    if not c:
        break
    r += c
if r.strip() != b"errno=0":
    sys.exit("wireguard UAPI: %r" % r)' "$2"
}
start_wireguard() {
  mkdir -p "$tmp/wg"
  local side ns dev addr peer_end peer_addr
  for side in a b; do [ -s "$tmp/wg/$side.key" ] || wgkey "$side"; done
  DAEMONS[wireguard]=
  for side in a b; do
    if [ $side = a ]; then ns=$NSA addr=$WG_A peer_end=$B peer_addr=$WG_B; else ns=$NSB addr=$WG_B peer_end=$A peer_addr=$WG_A; fi
    dev=wg-$side
    rm -f "/var/run/wireguard/$dev.sock"
    bgon "$ns" "wg-$side" env WG_PROCESS_FOREGROUND=1 LOG_LEVEL=error "$WG" "$dev"
    DAEMONS[wireguard]+=" $bgpid"
    within 10 test -S "/var/run/wireguard/$dev.sock" || die "wireguard-go did not start in $ns: $(tail -5 "$tmp/wg-$side.log")"
    printf 'set=1\nprivate_key=%s\nlisten_port=51820\nreplace_peers=true\npublic_key=%s\nendpoint=%s:51820\nreplace_allowed_ips=true\nallowed_ip=%s/32\n\n' \
      "$(cat "$tmp/wg/$side.key")" "$(cat "$tmp/wg/$([ $side = a ] && echo b || echo a).pub")" "$peer_end" "$peer_addr" |
      uapi_set "$ns" "/var/run/wireguard/$dev.sock"
    on "$ns" ip addr add "$addr/24" dev "$dev"
    on "$ns" ip link set "$dev" up
  done
  PEER[wireguard]=$WG_B IFACE[wireguard]=wg-a
  within 10 pings "$WG_B" || die "no ping over wireguard-go: $(tail -5 "$tmp"/wg-*.log)"
}

nebula_config() { # NAME LIGHTHOUSE(true|false)
  local d=$tmp/nebula
  cat <<EOF
pki:
  ca: $d/ca.crt
  cert: $d/$1.crt
  key: $d/$1.key
static_host_map:
  "$NEB_A": ["$A:4242"]
lighthouse:
  am_lighthouse: $2
  interval: 60
  hosts: [$([ "$2" = true ] || echo "\"$NEB_A\"")]
listen:
  host: 0.0.0.0
  port: 4242
punchy:
  punch: false
tun:
  dev: nebula1
logging:
  level: warning
firewall:
  outbound:
    - port: any
      proto: any
      host: any
  inbound:
    - port: any
      proto: any
      host: any
EOF
}
start_nebula() {
  local d=$tmp/nebula
  if [ ! -s "$d/ca.crt" ]; then
    mkdir -p "$d"
    "$NEBULA_CERT" ca -name vipbench -duration 24h -out-key "$d/ca.key" -out-crt "$d/ca.crt"
    "$NEBULA_CERT" sign -ca-key "$d/ca.key" -ca-crt "$d/ca.crt" -name a -networks "$NEB_A/24" -out-key "$d/a.key" -out-crt "$d/a.crt"
    "$NEBULA_CERT" sign -ca-key "$d/ca.key" -ca-crt "$d/ca.crt" -name b -networks "$NEB_B/24" -out-key "$d/b.key" -out-crt "$d/b.crt"
    nebula_config a true >"$d/a.yml"
    nebula_config b false >"$d/b.yml"
  fi
  bgon "$NSA" nebula-a "$NEBULA" -config "$d/a.yml"; DAEMONS[nebula]=$bgpid
  within 10 bound_udp "$NSA" 4242 || die "Nebula did not start in $NSA: $(tail -5 "$tmp/nebula-a.log")"
  bgon "$NSB" nebula-b "$NEBULA" -config "$d/b.yml"; DAEMONS[nebula]+=" $bgpid"
  PEER[nebula]=$NEB_B IFACE[nebula]=nebula1
  within 20 pings "$NEB_B" || die "no ping over Nebula: $(tail -5 "$tmp"/nebula-*.log)"
}

# start_gridlink: gridlink vip: not built yet. The step that builds
# `gridlink node --vip` fills this slot: start a hub and a --vip node in
# each of $NSA and $NSB (bgon), set PEER[gridlink] to b's virtual address,
# IFACE[gridlink] to a's TUN device and DAEMONS[gridlink] to the node pids,
# and add gridlink to PATHS; the tables and the targets below then fill in.

# --- measuring ---
: >"$tmp/results"
record_iperf() { # PHASE FLOWS ROUND PATH
  local phase=$1 flows=$2 round=$3 path=$4 c0 c1 t0 t1 rc=0
  c0=$(cpu) t0=$(ticks ${DAEMONS[$path]})
  onp "$NSA" timeout $LIMIT iperf3 -c "${PEER[$path]}" -p $IPERF_PORT -P "$flows" -t "$SECS" -O "$OMIT" -J >"$tmp/out" 2>"$tmp/out.err" || rc=$?
  c1=$(cpu) t1=$(ticks ${DAEMONS[$path]})
  python3 - "$phase" "$flows" "$round" "$path" "$tmp/out" "$rc" "$c0" "$c1" "$((t1 - t0))" "$(getconf CLK_TCK)" "$((SECS + OMIT))" >>"$tmp/results" <<'PY'
import json, sys
phase, flows, rnd, path, out, rc, c0, c1, dt, hz, secs = sys.argv[1:]
b0, a0 = map(int, c0.split()); b1, a1 = map(int, c1.split())
rec = {"t": "iperf", "phase": phase, "flows": int(flows), "round": int(rnd), "path": path,
       "busy": 100 * (b1 - b0) / max(a1 - a0, 1), "daemon_cpu": 100 * int(dt) / int(hz) / int(secs)}
raw = open(out).read()
try:
    r = json.loads(raw)
    if "error" in r:
        rec["error"] = r["error"]
    else:
        rec["mbit"] = r["end"]["sum_received"]["bits_per_second"] / 1e6
        rec["retransmits"] = r["end"]["sum_sent"].get("retransmits")
except ValueError:
    rec["error"] = "exit status %s, no JSON: %s %s" % (rc, raw[-200:], open(out + ".err").read()[-200:])
print(json.dumps(rec))
if "error" in rec:
    print("vip.sh: %s -P %s round %s %s: %s" % (phase, flows, rnd, path, rec["error"]), file=sys.stderr)
PY
}
record_ping() { # PHASE PATH
  local out rc=0
  out=$(on "$NSA" ping -q -c "$PINGS" -i "$PING_INTERVAL" -W 2 "${PEER[$2]}" 2>&1) || rc=$?
  python3 - "$1" "$2" "$(on "$NSA" cat "/sys/class/net/${IFACE[$2]}/mtu")" "$rc" "$out" >>"$tmp/results" <<'PY'
import json, re, sys
phase, path, mtu, rc, out = sys.argv[1:]
rec = {"t": "ping", "phase": phase, "path": path, "mtu": int(mtu)}
m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
l = re.search(r"([\d.]+)% packet loss", out)
if m:
    rec.update(min=float(m[1]), avg=float(m[2]), max=float(m[3]), mdev=float(m[4]))
else:
    rec["error"] = "ping exit status %s: %s" % (rc, out[-200:])
if l:
    rec["loss"] = float(l[1])
print(json.dumps(rec))
PY
}

run_phase() { # PHASE: with the hosts up, start the paths, ping, then the iperf3 rounds
  local phase=$1 path flows round i n
  for path in $PATHS; do "start_$path"; done
  bgon "$NSB" iperf3-s iperf3 -s -p $IPERF_PORT
  within 10 listening "$NSB" $IPERF_PORT || die "iperf3 -s did not start: $(tail -5 "$tmp/iperf3-s.log")"
  for path in $PATHS; do record_ping "$phase" "$path"; done
  local list=($PATHS)
  n=${#list[@]}
  for flows in $FLOWS; do
    for round in $(seq "$RUNS"); do
      for i in $(seq 0 $((n - 1))); do
        record_iperf "$phase" "$flows" "$round" "${list[$(((i + round - 1) % n))]}"
      done
    done
  done
  teardown
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
$GRIDLAB down >/dev/null 2>&1 || true
for phase in $PHASES; do
  ours=1 # from here on, teardown runs `gridlab down`, which also removes the veth pair's namespaces
  case $phase in
  veth)
    NSA=gl-vb-a NSB=gl-vb-b UNDERLAY_DEV=veth0
    for ns in $NSA $NSB; do ip netns add $ns; ip -n $ns link set lo up; done
    ip -n $NSA link add veth0 type veth peer name veth0 netns $NSB
    for x in "$NSA $A $B" "$NSB $B $A"; do
      set -- $x
      ip -n "$1" addr add "$2/32" dev veth0
      ip -n "$1" link set veth0 up
      ip -n "$1" route add "$3/32" dev veth0
    done
    echo "veth veth pair between two namespaces, no emulator" >>"$tmp/phases"
    ;;
  clean | wan)
    NSA=gl-a-a NSB=gl-b-b UNDERLAY_DEV=pub
    if [ $phase = clean ]; then set -- 0 0 0; else set -- "$RTT" "$RATE" "$LOSS"; fi
    $GRIDLAB up wan --set rtt="$1" --set rate="$2" --set loss="$3" >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log" >&2; die "gridlab up wan failed"; }
    emu=$(python3 -c 'import json; print(json.load(open("/run/gridlab/lab.json"))["emulator_pid"])')
    [ ${#EP[@]} -eq 0 ] || taskset -a -p 1 "$emu" >/dev/null
    if [ $phase = clean ]; then echo "clean wan topology, rtt 0, rate unlimited, no loss (two lab hosts across the link emulator)" >>"$tmp/phases"
    else echo "wan wan topology, rtt $1, rate $2, loss $3" >>"$tmp/phases"; fi
    ;;
  *) die "unknown phase $phase (want veth, clean or wan)" ;;
  esac
  run_phase "$phase"
done

python3 - "$tmp/results" "$tmp/phases" <<PY
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
phases = [l.rstrip("\n").split(" ", 1) for l in open(sys.argv[2])]
flows_list = [int(f) for f in "$FLOWS".split()]
paths = "$PATHS".split()
names = {"plain": "plain (no tunnel)", "wireguard": "wireguard-go", "nebula": "Nebula", "gridlink": "gridlink vip"}
med = lambda xs: statistics.median(xs) if xs else None
f1 = lambda x: "%.1f" % x if x is not None else "–"
pct = lambda x: "%.1f%%" % (100 * x) if x is not None else "–"
def iperf(phase, flows, path):
    return sorted((r for r in recs if r["t"] == "iperf" and r["phase"] == phase and r["flows"] == flows and r["path"] == path), key=lambda r: r["round"])
def rate(phase, flows, path):
    return med([r["mbit"] for r in iperf(phase, flows, path) if "mbit" in r])
def paired(phase, flows, num, den="plain"):
    d = {r["round"]: r.get("mbit") for r in iperf(phase, flows, den)}
    return [r["mbit"] / d[r["round"]] for r in iperf(phase, flows, num) if r.get("mbit") and d.get(r["round"])]
def ping(phase, path):
    return next((r for r in recs if r["t"] == "ping" and r["phase"] == phase and r["path"] == path), None)

print("### Virtual IP network: the baselines (bench/vip.sh)")
print()
print("iperf3 %s (Debian), wireguard-go %s (golang.zx2c4.com/wireguard@%s), Nebula %s (lighthouse on host a). "
      "Machine load before the run: %s. Rates in Mbit/s received, median of %d rounds of %d s after %d s of ramp-up, "
      "the paths alternating within each round; ratios to plain are medians of per-round ratios. Ping: %d probes, %s s apart, "
      "average round trip (min/mdev in brackets). Tunnel CPU: the two tunnel daemons' CPU time during a run, in %% of one vCPU (median)%s."
      % ("$iperf_version", "$wg_banner".replace("wireguard-go ", ""), "$WG_VERSION", "$NEBULA_VERSION", "$load_before", $RUNS, $SECS, $OMIT,
         $PINGS, "$PING_INTERVAL", "; the link emulator on CPU 0, every endpoint and tunnel daemon on the other CPUs" if "${EP[*]}" else ""))
veth_plain = {f: rate("veth", f, "plain") for f in flows_list}
for phase, label in phases:
    print()
    print("#### %s: %s" % (phase, label))
    print()
    print("| path | MTU | ping ms | vs plain | " + " | ".join("-P %d Mbit/s (runs) | vs plain | tunnel CPU | machine busy" % f for f in flows_list) + " |")
    print("|---|---|---|---|" + "---|---|---|---|" * len(flows_list))
    pp = ping(phase, "plain")
    for path in paths + ([] if "gridlink" in paths else ["gridlink"]):
        if path not in paths:
            print("| **gridlink vip: not built yet** | | | |" + " | | | |" * len(flows_list))
            continue
        p = ping(phase, path)
        cells = [names[path], str(p["mtu"]) if p else "–"]
        if p and "avg" in p:
            cells.append("%.3f (%.3f/%.3f)%s" % (p["avg"], p["min"], p["mdev"], ", loss %g%%" % p["loss"] if p.get("loss") else ""))
            cells.append("+%.0f µs" % (1000 * (p["avg"] - pp["avg"])) if path != "plain" and pp and "avg" in pp else "")
        else:
            cells += ["error: %s" % (p or {}).get("error", "no ping"), ""]
        for f in flows_list:
            rs = iperf(phase, f, path)
            vals = [r["mbit"] for r in rs if "mbit" in r]
            errs = [r["error"] for r in rs if "error" in r]
            cells.append("%s (%s)%s" % (f1(med(vals)), " ".join("%.0f" % v for v in vals), "; %d failed: %s" % (len(errs), errs[0][:60]) if errs else ""))
            cells.append("" if path == "plain" else pct(med(paired(phase, f, path))))
            cells.append("%.0f%%" % med([r["daemon_cpu"] for r in rs]) if rs and path != "plain" else "")
            cells.append("%.0f%%" % med([r["busy"] for r in rs]) if rs else "")
        print("| " + " | ".join(cells) + " |")

def ref(phase, f, path):
    return rate(phase, f, path)
print()
print("#### What gridlink vip must reach (issue 19), and the baselines in this run")
print()
print("| target | gridlink vip | baselines in this run |")
print("|---|---|---|")
for f in flows_list:
    wg, nb, pl = ref("clean", f, "wireguard"), ref("clean", f, "nebula"), ref("clean", f, "plain")
    vp = veth_plain.get(f)
    print("| clean link, -P %d: ≥ 1.0x wireguard-go | **not built yet** | wireguard-go %s Mbit/s (%s of plain) |" % (f, f1(wg), pct(med(paired("clean", f, "wireguard")))))
    print("| clean link, -P %d: ≥ 2x Nebula | **not built yet** | Nebula %s Mbit/s (%s of plain); wireguard-go / Nebula %s |" % (f, f1(nb), pct(med(paired("clean", f, "nebula"))), "%.2fx" % (wg / nb) if wg and nb else "–"))
    print("| clean link, -P %d: ≥ 30%% of the plain veth | **not built yet** | plain veth %s Mbit/s; over the veth: wireguard-go %s, Nebula %s of it; across the emulator: plain %s, wireguard-go %s, Nebula %s of it |" % (
        f, f1(vp), pct(ref("veth", f, "wireguard") / vp) if vp and ref("veth", f, "wireguard") else "–", pct(ref("veth", f, "nebula") / vp) if vp and ref("veth", f, "nebula") else "–",
        pct(pl / vp) if vp and pl else "–", pct(wg / vp) if vp and wg else "–", pct(nb / vp) if vp and nb else "–"))
    print("| wan (%s, %s loss), -P %d: ≥ 90%% of plain, same flows | **not built yet** | plain %s Mbit/s; wireguard-go %s, Nebula %s of it |" % (
        "$RTT", "$LOSS", f, f1(ref("wan", f, "plain")), pct(med(paired("wan", f, "wireguard"))), pct(med(paired("wan", f, "nebula")))))
pc = ping("clean", "plain")
def added(phase, path):
    p, q = ping(phase, path), ping(phase, "plain")
    return "+%.0f µs" % (1000 * (p["avg"] - q["avg"])) if p and q and "avg" in p and "avg" in q else "–"
print("| ping over a direct shortcut ≤ plain + 100 µs | **not built yet** | clean link plain %s ms; wireguard-go %s, Nebula %s; over the veth: wireguard-go %s, Nebula %s |" % (
    "%.3f" % pc["avg"] if pc and "avg" in pc else "–", added("clean", "wireguard"), added("clean", "nebula"), added("veth", "wireguard"), added("veth", "nebula")))
print("| ping, routed-only pair within 5% of the routed round trip | **not built yet** | (needs gridlink's hubs: no baseline here) |")
print()
print("\`\`\`sh")
print("FLOWS='$FLOWS' RUNS=$RUNS SECS=$SECS OMIT=$OMIT RTT=$RTT RATE=$RATE LOSS=$LOSS PINGS=$PINGS bench/vip.sh   # as root, idle machine; make deps build first")
print("\`\`\`")
PY
