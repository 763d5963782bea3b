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
#   nebula     Nebula at its defaults: a CA and host certificates made by
#              nebula-cert, host a is the lighthouse, b finds a through it
#              (static_host_map)
#   nebula-tuned  the same with its TUN and UDP offloads on and bigger
#              socket buffers (see nebula_config)
#   gridlink   gridlink vip: `gridlink node --vip` on a and b, a hub on a,
#              measured over the pair's direct shortcut (start_gridlink)
#   gridlink-routed  a second gridlink vip pair kept routed through the hub
#              by nft (ping only by default, see NO_IPERF): the issue's
#              "routed-only pair", against `gridlink ping` between the
#              same two nodes
# Each tunnel keeps its default MTU (wireguard-go 1420, Nebula 1300; Nebula
# one routine; gridlink 65535, DefaultVIPMTU) with a firewall that lets everything through.
# For every number of flows in FLOWS: RUNS rounds, each running iperf3 -P
# FLOWS once over every path (the paths alternate, the first one rotates
# from round to round); rates are the received rate after OMIT s of ramp-up
# over SECS s; ratios are medians of per-round ratios against the plain path
# of the same round (against the plain veth: ratios of medians). Ping: PINGS
# probes every PING_INTERVAL s over each path, no other traffic.
#
# It installs what it measures: iperf3 from Debian's packages (`make deps`),
# wireguard-go and Nebula with `go install` at the pinned versions below
# into its scratch directory (GOBIN; nothing system-wide; Nebula v1.12 in a
# wrapper module, see NEBULA_VERSION). Before each run it waits for a quiet
# machine (QUIET, QUIET_WAIT) and reports how busy the machine was.
#
# With PIN=1 (the default on 2+ CPUs) the link emulator gets CPU 0 and every
# endpoint (iperf3, wireguard-go, Nebula, both hosts) the other CPUs, as in
# bench/lab.sh; the veth runs pin the endpoints the same way.
#
# Everything runs inside lab namespaces (the veth pair's are gl-vb-a and
# gl-vb-b, so `gridlab down` removes them too); the lab lock of lab tests
# (/run/gridlab/test.lock, see internal/lab/labtest) is held for the whole
# run (about 25 minutes with the defaults, 13 with RUNS=2 SECS=6), and everything is torn down at
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
FAST_INTERVAL=${FAST_INTERVAL:-0.002} # every path is pinged at this interval too (gridlink ping's round trips follow each other)
PHASES=${PHASES:-veth clean wan}
PATHS=${PATHS:-plain wireguard nebula nebula-tuned gridlink gridlink-routed}
QUIET=${QUIET:-25}         # before each iperf3 run, wait until the machine is under QUIET% busy over 2 s,
QUIET_WAIT=${QUIET_WAIT:-60} # for at most QUIET_WAIT s (other work starves the tunnels and the emulator)
# wireguard-go: the module is golang.zx2c4.com/wireguard (no tags the module
# proxy accepts); this is the commit whose tun package gridlink's `tun` uses
# (go.mod), wireguard-go 0.0.20250522.
WG_VERSION=${WG_VERSION:-v0.0.0-20260522210424-ecfc5a8d5446}
# Nebula: v1.11.0 and later need two modules the module proxy refuses ("403
# This module version is not available": github.com/DefinedNet/netlink, a
# fork of vishvananda/netlink, and github.com/DefinedNet/dnsconfig), and
# v1.12.0 a gvisor pseudo-version it refuses too, so `go install` cannot
# build them here. build_nebula builds them in a wrapper module instead, with
# the Go toolchain they ask for and three replacements that leave Nebula's
# packet path as it is: upstream vishvananda/netlink v1.3.1 for the fork (the
# fork's additions are used by Android code only), a stand-in for dnsconfig
# that manages no host DNS (Nebula's `dns` stanza, off by default, is then
# declined), and the gvisor that wireguard-go pins (Nebula uses its
# pkg/tcpip/checksum). Versions before v1.11 are installed with `go install`.
NEBULA_VERSION=${NEBULA_VERSION:-v1.12.0}
NEBULA_GO=${NEBULA_GO:-go1.27.3} # GOTOOLCHAIN for Nebula v1.12 (its go.mod asks for 1.27.3)
NEBULA_GVISOR=v0.0.0-20250503011706-39ed1f5ac29c NEBULA_NETLINK=v1.3.1
A=198.51.100.10 B=198.51.100.26 IPERF_PORT=5301 # wan: a and b; the veth pair uses the same
WG_A=100.64.1.1 WG_B=100.64.1.2 NEB_A=100.64.2.1 NEB_B=100.64.2.2 NEBT_A=100.64.3.1 NEBT_B=100.64.3.2
LIMIT=$((SECS + OMIT + 60)) # a client run that takes longer is stopped and counted as failed

trap 'teardown; rm -f /var/run/wireguard/wg-a.sock /var/run/wireguard/wg-b.sock; rm -rf "$tmp"' EXIT

# --- what it measures, installed at pinned versions ---
make -s deps >&2
export GOBIN=$tmp/gobin
mkdir -p "$GOBIN"
(cd "$tmp" && go install "golang.zx2c4.com/wireguard@$WG_VERSION") || die "go install wireguard-go $WG_VERSION failed"

build_nebula() { # into $GOBIN, see NEBULA_VERSION
  case $NEBULA_VERSION in
  v1.[0-9].* | v1.10.*)
    cd "$tmp" && go install "github.com/slackhq/nebula/cmd/nebula@$NEBULA_VERSION" "github.com/slackhq/nebula/cmd/nebula-cert@$NEBULA_VERSION"
    return ;;
  esac
  local w=$tmp/nebula-build nl
  export GOTOOLCHAIN=$NEBULA_GO
  mkdir -p "$w/dnsconfig"
  nl=$(cd "$tmp" && go mod download -json "github.com/vishvananda/netlink@$NEBULA_NETLINK" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  cp -r "$nl" "$w/netlink"
  chmod -R u+w "$w/netlink"
  sed -i 's#^module github.com/vishvananda/netlink$#module github.com/DefinedNet/netlink#' "$w/netlink/go.mod"
  grep -rl 'github.com/vishvananda/netlink/nl' "$w/netlink" --include='*.go' | xargs sed -i 's#"github.com/vishvananda/netlink/nl"#"github.com/DefinedNet/netlink/nl"#'
  printf 'module github.com/DefinedNet/dnsconfig\n\ngo 1.22\n' >"$w/dnsconfig/go.mod"
  cat >"$w/dnsconfig/dnsconfig.go" <<'GO'
// Package dnsconfig stands in for github.com/DefinedNet/dnsconfig, which the
// module proxy does not serve, in bench/vip.sh's build of Nebula: it manages
// no host DNS, so Nebula's dns stanza (off by default) is declined.
package dnsconfig

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
)

type BackendKind int

const BackendAuto BackendKind = 0

var (
	ErrConfigurationDeclined = errors.New("host DNS configuration is not built in (bench/vip.sh)")
	ErrInterfaceRequired     = errors.New("interface required")
)

type Config struct {
	Nameservers                 []netip.Addr
	SearchDomains, MatchDomains []string
}

func (c Config) Validate() error { return nil }
func (c Config) IsSplit() bool   { return len(c.MatchDomains) > 0 }

type Options struct {
	Identity, InterfaceName string
	Logger                  *slog.Logger
	ForceBackend            BackendKind
}

type Manager struct{}

func New(context.Context, Options) (*Manager, error) { return &Manager{}, nil }
func (*Manager) Set(Config) error                    { return ErrConfigurationDeclined }
func (*Manager) Clear() error                        { return nil }
func (*Manager) Close() error                        { return nil }
func ValidateIdentity(string) error                  { return nil }
GO
  cat >"$w/go.mod" <<MOD
module vipbench/nebula

go ${NEBULA_GO#go}

require github.com/slackhq/nebula $NEBULA_VERSION

replace (
	github.com/DefinedNet/dnsconfig => ./dnsconfig
	github.com/DefinedNet/netlink => ./netlink
	gvisor.dev/gvisor => gvisor.dev/gvisor $NEBULA_GVISOR
)
MOD
  cat >"$w/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "github.com/slackhq/nebula/cmd/nebula"
	_ "github.com/slackhq/nebula/cmd/nebula-cert"
)
GO
  cd "$w" && go mod tidy && go build -o "$GOBIN/" github.com/slackhq/nebula/cmd/nebula github.com/slackhq/nebula/cmd/nebula-cert
}
(build_nebula) || die "building Nebula $NEBULA_VERSION failed"
case $NEBULA_VERSION in v1.[0-9].* | v1.10.*) nebula_note= ;; *) nebula_note="; built with $NEBULA_GO, netlink fork and dnsconfig replaced, see bench/vip.sh" ;; esac
WG=$GOBIN/wireguard NEBULA=$GOBIN/nebula NEBULA_CERT=$GOBIN/nebula-cert
iperf_version=$(dpkg-query -W -f='${Version}' iperf3)
wg_banner=$("$WG" --version | head -1)

EP=()
if [ "${PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ]; then EP=(taskset -c "1-$(($(nproc) - 1))"); fi
on() { local ns=$1; shift; ip netns exec "$ns" "$@"; }          # NS COMMAND...
onp() { local ns=$1; shift; ip netns exec "$ns" "${EP[@]}" "$@"; } # the same, on the endpoints' CPUs
bgon() { # NS LOG COMMAND...: runs COMMAND in NS in the background, pinned; its pid in $bgpid
  local ns=$1 log=$2; shift 2
  ip netns exec "$ns" "${EP[@]}" "$@" >"$tmp/$log.log" 2>&1 &
  bgpid=$!; pids+=("$bgpid") # ip netns exec and taskset exec: the command's own pid
}
listening() { on "$1" ss -Hltn "sport = :$2" | grep -q .; } # NS PORT
bound_udp() { on "$1" ss -Hlun "sport = :$2" | grep -q .; }  # NS PORT
pings() { on "$NSA" ping -c 1 -W 1 "$1" >/dev/null 2>&1; }
cpu() { head -1 /proc/stat | awk '{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}'; }
busy() { # machine CPU busy % over $1 s
  local a b; a=$(cpu); sleep "$1"; b=$(cpu)
  awk -v a="$a" -v b="$b" 'BEGIN {split(a, x); split(b, y); printf "%d", 100 * (y[1] - x[1]) / (y[2] - x[2] + 1e-9)}'
}
quiet() { # waits for a quiet machine (see QUIET) and prints the last busy %
  local end=$((SECONDS + QUIET_WAIT)) b
  while :; do b=$(busy 2); (( b < QUIET || SECONDS >= end )) && break; done
  echo "$b"
}
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

# Nebula twice: `nebula` at its defaults (no TUN or UDP offloads, the
# system's socket buffers) and `nebula-tuned` with what its example config
# offers for speed: tun.use_offloads and listen.udp_offloads (GSO/GRO, new in
# v1.12, off by default) and 3.4 MB socket buffers. Both one routine, MTU 1300.
nebula_config() { # PATH NAME LIGHTHOUSE(true|false) PORT DEV LIGHTHOUSE_ADDR
  local d=$tmp/nebula
  cat <<EOF
pki:
  ca: $d/ca.crt
  cert: $d/$1-$2.crt
  key: $d/$1-$2.key
static_host_map:
  "$6": ["$A:$4"]
lighthouse:
  am_lighthouse: $3
  interval: 60
  hosts: [$([ "$3" = true ] || echo "\"$6\"")]
listen:
  host: 0.0.0.0
  port: $4
$([ "$1" = nebula-tuned ] && printf '  read_buffer: 3412512\n  write_buffer: 3412512\n  udp_offloads: true\n')
punchy:
  punch: false
tun:
  dev: $5
$([ "$1" = nebula-tuned ] && printf '  use_offloads: true\n')
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
start_nebula_path() { # PATH PORT DEV A-ADDR B-ADDR
  local path=$1 port=$2 dev=$3 na=$4 nb=$5 d=$tmp/nebula
  mkdir -p "$d"
  [ -s "$d/ca.crt" ] || "$NEBULA_CERT" ca -name vipbench -duration 24h -out-key "$d/ca.key" -out-crt "$d/ca.crt"
  if [ ! -s "$d/$path-a.crt" ]; then
    "$NEBULA_CERT" sign -ca-key "$d/ca.key" -ca-crt "$d/ca.crt" -name "$path-a" -networks "$na/24" -out-key "$d/$path-a.key" -out-crt "$d/$path-a.crt"
    "$NEBULA_CERT" sign -ca-key "$d/ca.key" -ca-crt "$d/ca.crt" -name "$path-b" -networks "$nb/24" -out-key "$d/$path-b.key" -out-crt "$d/$path-b.crt"
    nebula_config "$path" a true "$port" "$dev" "$na" >"$d/$path-a.yml"
    nebula_config "$path" b false "$port" "$dev" "$na" >"$d/$path-b.yml"
  fi
  bgon "$NSA" "$path-a" "$NEBULA" -config "$d/$path-a.yml"; DAEMONS[$path]=$bgpid
  within 10 bound_udp "$NSA" "$port" || die "Nebula ($path) did not start in $NSA: $(tail -5 "$tmp/$path-a.log")"
  bgon "$NSB" "$path-b" "$NEBULA" -config "$d/$path-b.yml"; DAEMONS[$path]+=" $bgpid"
  PEER[$path]=$nb IFACE[$path]=$dev
  within 20 pings "$nb" || die "no ping over Nebula ($path): $(tail -5 "$tmp/$path"-*.log)"
}
start_nebula() { start_nebula_path nebula 4242 nebula1 "$NEB_A" "$NEB_B"; }
start_nebula-tuned() { start_nebula_path nebula-tuned 4243 nebula2 "$NEBT_A" "$NEBT_B"; }

# gridlink vip, twice, with one hub on host a (as bench/lab.sh puts it):
#   gridlink         `gridlink node --vip` on a and b (names off), measured
#                    once b's address answers a's ping and a's status shows
#                    the pair's path as direct (the shortcut)
#   gridlink-routed  a second pair (its own prefixes and TUN device
#                    gridlink1) that nft keeps off every direct, reverse
#                    and spliced connection: the pair runs with group
#                    GL_GID, and each host drops that group's TCP to the
#                    other host but to the hub's port, so its packets go
#                    through the hub. Its reference is `gridlink ping`
#                    between the same two nodes (routed too), same run.
# For both, `gridlink ping` (the echo service over a vconn connection, the
# pair's own path) is recorded beside the ICMP ping.
GL_HUB_PORT=7946 GL_GID=${GL_GID:-65534} GL_DIRECT_GID=${GL_DIRECT_GID:-65533}
GL_ARGS=${GL_ARGS:-}           # more `gridlink node` flags for all four nodes, e.g. --vip-mtu 1420
NO_IPERF=${NO_IPERF:-gridlink-routed} # paths that get ping only (routed throughput is not a target)
GL_HUB=
start_gl_hub() { # a hub on host a, once a phase
  [ -n "$GL_HUB" ] && return 0
  # the routed pair's prefixes (start_gridlink-routed) besides the defaults
  bgon "$NSA" gl-hub "$GRIDLINK" hub --name vb-hub --listen "0.0.0.0:$GL_HUB_PORT" \
    --vip-prefix 100.96.0.0/12 --vip-prefix fd67:726c::/32 --vip-prefix 100.112.0.0/12 --vip-prefix fd67:726d::/32; GL_HUB=$bgpid
  within 10 listening "$NSA" $GL_HUB_PORT || die "gridlink hub did not start: $(tail -5 "$tmp/gl-hub.log")"
}
gl_node() { # NS NAME HUB DEV CONTROL [WRAPPER...]: a --vip node (pid in bgpid, its IPv4 address in glv4)
  local ns=$1 name=$2 hub=$3 dev=$4 ctl=$5; shift 5
  # shellcheck disable=SC2086
  bgon "$ns" "gl-$name" "$@" "$GRIDLINK" node --name "$name" --verbose --hub "$hub" --control "$ctl" \
    --vip --vip-dev "$dev" --vip-names=false $GL_ARGS
  within 30 grep -q "virtual network on $dev" "$tmp/gl-$name.log" || die "gridlink node $name did not start its virtual network: $(tail -5 "$tmp/gl-$name.log")"
  glv4=$(sed -n "s#.*virtual network on $dev: \[\([0-9.]*\)/.*#\1#p" "$tmp/gl-$name.log" | head -1)
  [ -n "$glv4" ] || die "gridlink node $name printed no IPv4 address: $(tail -5 "$tmp/gl-$name.log")"
}
gl_path() { # NS CONTROL PEER: the peer's path in the node's `gridlink status --json`
  on "$1" "$GRIDLINK" status --json --control "$2" | python3 -c '
import json, sys
vip = json.load(sys.stdin).get("vip") or {}
print(next((p["path"] for p in vip.get("peers") or [] if p.get("name") == sys.argv[1] and p.get("connected")), ""))' "$3"
}
gl_is() { [ "$(gl_path "$1" "$2" "$3")" = "$4" ]; } # NS CONTROL PEER PATH
gl_shortcut() { case $(gl_path "$1" "$2" "$3") in direct | reverse | splice) return 0 ;; esac; return 1; } # NS CONTROL PEER
declare -A GL_CTL GL_PEERNAME
start_gridlink() {
  start_gl_hub
  # The nodes advertise every address of their host, the other tunnels'
  # too (100.64.x): a "direct" connection through wireguard-go or Nebula
  # would measure gridlink over them. nft keeps the pair (group
  # GL_DIRECT_GID) on the hosts' own addresses.
  local x g=(setpriv --regid="$GL_DIRECT_GID" --clear-groups)
  for x in $NSA $NSB; do
    on "$x" nft -f - <<EOF || die "nft in $x failed"
table inet vipbench_direct {
  chain out {
    type filter hook output priority 0; policy accept;
    meta skgid $GL_DIRECT_GID meta l4proto tcp ip daddr != { 127.0.0.0/8, $A, $B } counter drop
    meta skgid $GL_DIRECT_GID meta l4proto tcp meta nfproto ipv6 counter drop
  }
}
EOF
  done
  gl_node "$NSA" vb-a "127.0.0.1:$GL_HUB_PORT" gridlink0 @vipbench-a "${g[@]}"; DAEMONS[gridlink]=$bgpid
  gl_node "$NSB" vb-b "$A:$GL_HUB_PORT" gridlink0 @vipbench-b "${g[@]}"; DAEMONS[gridlink]+=" $bgpid"
  PEER[gridlink]=$glv4 IFACE[gridlink]=gridlink0 GL_CTL[gridlink]=@vipbench-a GL_PEERNAME[gridlink]=vb-b
  within 30 pings "$glv4" || die "no ping over gridlink vip: $(tail -5 "$tmp"/gl-vb-*.log)"
  within 30 gl_shortcut "$NSA" @vipbench-a vb-b || die "gridlink vip: no shortcut (path: $(gl_path "$NSA" @vipbench-a vb-b))"
  on "$NSA" ss -Htnp state established | grep '"gridlink"' | grep -v ":$GL_HUB_PORT " >"$tmp/gl-carrier" || true
  grep -Eq "${A//./\\.}]?:" "$tmp/gl-carrier" || die "gridlink vip: the pair's direct connection is not on the hosts' own addresses: $(cat "$tmp/gl-carrier")"
}
start_gridlink-routed() {
  start_gl_hub
  local x
  for x in $NSA $NSB; do
    on "$x" nft -f - <<EOF || die "nft in $x failed"
table inet vipbench_routed {
  chain out {
    type filter hook output priority 0; policy accept;
    meta skgid $GL_GID meta l4proto tcp ip daddr != 127.0.0.0/8 tcp dport != $GL_HUB_PORT counter drop
    meta skgid $GL_GID meta l4proto tcp meta nfproto ipv6 counter drop
  }
}
EOF
  done
  local pfx=(--vip-prefix4 100.112.0.0/12 --vip-prefix6 fd67:726d::/32) g=(setpriv --regid="$GL_GID" --clear-groups)
  GL_ARGS="$GL_ARGS ${pfx[*]}" gl_node "$NSA" vr-a "127.0.0.1:$GL_HUB_PORT" gridlink1 @vipbench-ra "${g[@]}"; DAEMONS[gridlink-routed]="$GL_HUB $bgpid"
  GL_ARGS="$GL_ARGS ${pfx[*]}" gl_node "$NSB" vr-b "$A:$GL_HUB_PORT" gridlink1 @vipbench-rb "${g[@]}"; DAEMONS[gridlink-routed]+=" $bgpid"
  PEER[gridlink-routed]=$glv4 IFACE[gridlink-routed]=gridlink1 GL_CTL[gridlink-routed]=@vipbench-ra GL_PEERNAME[gridlink-routed]=vr-b
  within 30 pings "$glv4" || die "no ping over gridlink vip (routed): $(tail -5 "$tmp"/gl-vr-*.log)"
  within 10 gl_is "$NSA" @vipbench-ra vr-b routed || die "gridlink vip: the routed pair's path is $(gl_path "$NSA" @vipbench-ra vr-b); nft: $(on "$NSA" nft list ruleset; on "$NSB" nft list ruleset); $(grep -h -i "direct\|reverse\|splice" "$tmp"/gl-vr-*.log | tail -5)"
}

# --- measuring ---
: >"$tmp/results"
record_iperf() { # PHASE FLOWS ROUND PATH
  local phase=$1 flows=$2 round=$3 path=$4 c0 c1 t0 t1 rc=0 bg
  bg=$(quiet)
  c0=$(cpu) t0=$(ticks ${DAEMONS[$path]})
  onp "$NSA" timeout $LIMIT iperf3 -c "${PEER[$path]}" -p $IPERF_PORT -P "$flows" -t "$SECS" -O "$OMIT" -J >"$tmp/out" 2>"$tmp/out.err" || rc=$?
  c1=$(cpu) t1=$(ticks ${DAEMONS[$path]})
  python3 - "$phase" "$flows" "$round" "$path" "$tmp/out" "$rc" "$c0" "$c1" "$((t1 - t0))" "$(getconf CLK_TCK)" "$((SECS + OMIT))" "$bg" >>"$tmp/results" <<'PY'
import json, sys
phase, flows, rnd, path, out, rc, c0, c1, dt, hz, secs, bg = sys.argv[1:]
b0, a0 = map(int, c0.split()); b1, a1 = map(int, c1.split())
rec = {"t": "iperf", "phase": phase, "flows": int(flows), "round": int(rnd), "path": path,
       "busy": 100 * (b1 - b0) / max(a1 - a0, 1), "bg": int(bg), "daemon_cpu": 100 * int(dt) / int(hz) / int(secs)}
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
record_ping() { # PHASE PATH [TYPE INTERVAL]: ICMP ping, PING_INTERVAL apart (or INTERVAL, recorded as TYPE)
  local out rc=0
  quiet >/dev/null
  out=$(on "$NSA" ping -c "$PINGS" -i "${4:-$PING_INTERVAL}" -W 2 "${PEER[$2]}" 2>&1) || rc=$?
  python3 - "$1" "$2" "$(on "$NSA" cat "/sys/class/net/${IFACE[$2]}/mtu")" "$rc" "$out" "${3:-ping}" >>"$tmp/results" <<'PY'
import json, re, statistics, sys
phase, path, mtu, rc, out, t = sys.argv[1:]
rec = {"t": t, "phase": phase, "path": path, "mtu": int(mtu)}
ts = [float(t) for t in re.findall(r"time=([\d.]+) ms", out)]
l = re.search(r"([\d.]+)% packet loss", out)
if ts:
    rec.update(min=min(ts), avg=statistics.median(ts), max=max(ts), mdev=statistics.pstdev(ts))
else:
    rec["error"] = "ping exit status %s: %s" % (rc, out[-200:])
if l:
    rec["loss"] = float(l[1])
print(json.dumps(rec))
PY
}

record_gping() { # PHASE PATH: `gridlink ping` between the path's two nodes (its round trips on one connection)
  local out rc=0
  quiet >/dev/null
  out=$(on "$NSA" timeout 60 "$GRIDLINK" ping "${GL_PEERNAME[$2]}" --control "${GL_CTL[$2]}" --json -c "$PINGS" --dials 1 2>&1) || rc=$?
  python3 - "$1" "$2" "$rc" "$out" >>"$tmp/results" <<'PY'
import json, statistics, sys
phase, path, rc, out = sys.argv[1:]
rec = {"t": "gping", "phase": phase, "path": path}
try:
    r = json.loads(out)
    ts = r.get("rtt_ms") or []
    rec["method"] = r.get("method")
    if ts:
        rec.update(min=min(ts), avg=statistics.median(ts), max=max(ts))
    else:
        rec["error"] = r.get("error") or "no round trips"
except ValueError:
    rec["error"] = "exit status %s: %s" % (rc, out[-200:])
print(json.dumps(rec))
PY
}
record_glstat() { # PHASE PATH NS CONTROL NODE: the node's virtual network counters after the phase
  on "$3" "$GRIDLINK" status --json --control "$4" 2>/dev/null | python3 -c '
import json, sys
phase, path, node = sys.argv[1:]
v = json.load(sys.stdin).get("vip") or {}
print(json.dumps({"t": "glstat", "phase": phase, "path": path, "node": node, "drops": v.get("drops"),
                  "peers": [{k: p.get(k) for k in ("name", "path", "paths", "sent_packets", "recv_packets", "queue_full_packets", "conn_lost_packets", "path_switches")} for p in v.get("peers") or []]}))' "$1" "$2" "$5" >>"$tmp/results" || true
}

run_phase() { # PHASE: with the hosts up, start the paths, ping, then the iperf3 rounds
  local phase=$1 path flows round i n
  GL_HUB=
  for path in $PATHS; do "start_$path"; done
  bgon "$NSB" iperf3-s iperf3 -s -p $IPERF_PORT
  within 10 listening "$NSB" $IPERF_PORT || die "iperf3 -s did not start: $(tail -5 "$tmp/iperf3-s.log")"
  for path in $PATHS; do
    record_ping "$phase" "$path"
    record_ping "$phase" "$path" fastping "$FAST_INTERVAL"
    case $path in gridlink*) record_gping "$phase" "$path" ;; esac
  done
  local list=()
  for path in $PATHS; do case " $NO_IPERF " in *" $path "*) ;; *) list+=("$path") ;; esac; done
  n=${#list[@]}
  for flows in $FLOWS; do
    for round in $(seq "$RUNS"); do
      for i in $(seq 0 $((n - 1))); do
        record_iperf "$phase" "$flows" "$round" "${list[$(((i + round - 1) % n))]}"
      done
    done
  done
  case " $PATHS " in *" gridlink "*) record_glstat "$phase" gridlink "$NSA" @vipbench-a vb-a; record_glstat "$phase" gridlink "$NSB" @vipbench-b vb-b ;; esac
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

# KEEP=DIR: keep the raw records (results, phases) there, e.g. to redo the tables
[ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$tmp/results" "$tmp/phases" "$KEEP/"; }
python3 - "$tmp/results" "$tmp/phases" <<PY
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
phases = [l.rstrip("\n").split(" ", 1) for l in open(sys.argv[2])]
flows_list = [int(f) for f in "$FLOWS".split()]
paths = "$PATHS".split()
names = {"plain": "plain (no tunnel)", "wireguard": "wireguard-go", "nebula": "Nebula (defaults)", "nebula-tuned": "Nebula (offloads, buffers)", "gridlink": "gridlink vip (shortcut)", "gridlink-routed": "gridlink vip (routed only)"}
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
print("iperf3 %s (Debian), wireguard-go %s (golang.zx2c4.com/wireguard@%s), Nebula %s (lighthouse on host a%s). "
      "Machine load before the run: %s. Rates in Mbit/s received, median of %d rounds of %d s after %d s of ramp-up, "
      "the paths alternating within each round; ratios to plain are medians of per-round ratios. Ping: %d probes, %s s apart, "
      "median round trip (min/max in brackets). Retransmits: the iperf3 sender's TCP retransmissions in a run (median). Tunnel CPU: the two tunnel daemons' CPU time during a run, in %% of one vCPU (median)%s."
      % ("$iperf_version", "$wg_banner".replace("wireguard-go ", ""), "$WG_VERSION", "$NEBULA_VERSION", "$nebula_note", "$load_before", $RUNS, $SECS, $OMIT,
         $PINGS, "$PING_INTERVAL", "; the link emulator on CPU 0, every endpoint and tunnel daemon on the other CPUs" if "${EP[*]}" else ""))
veth_plain = {f: rate("veth", f, "plain") for f in flows_list}
for phase, label in phases:
    print()
    print("#### %s: %s" % (phase, label))
    print()
    print("| path | MTU | ping ms | vs plain | " + " | ".join("-P %d Mbit/s (runs) | vs plain | retransmits | tunnel CPU | machine busy" % f for f in flows_list) + " |")
    print("|---|---|---|---|" + "---|---|---|---|---|" * len(flows_list))
    pp = ping(phase, "plain")
    for path in paths:
        p = ping(phase, path)
        cells = [names[path], str(p["mtu"]) if p else "–"]
        if p and "avg" in p:
            cells.append("%.3f (%.3f/%.3f)%s" % (p["avg"], p["min"], p["max"], ", loss %g%%" % p["loss"] if p.get("loss") else ""))
            cells.append("%+.0f µs" % (1000 * (p["avg"] - pp["avg"])) if path != "plain" and pp and "avg" in pp else "")
        else:
            cells += ["error: %s" % (p or {}).get("error", "no ping"), ""]
        for f in flows_list:
            rs = iperf(phase, f, path)
            vals = [r["mbit"] for r in rs if "mbit" in r]
            errs = [r["error"] for r in rs if "error" in r]
            cells.append("%s (%s)%s" % (f1(med(vals)), " ".join("%.0f" % v for v in vals), "; %d failed: %s" % (len(errs), errs[0][:60]) if errs else ""))
            cells.append("" if path == "plain" else pct(med(paired(phase, f, path))))
            retr = [r["retransmits"] for r in rs if r.get("retransmits") is not None]
            cells.append("%d" % med(retr) if retr else "")
            cells.append("%.0f%%" % med([r["daemon_cpu"] for r in rs]) if rs and path != "plain" else "")
            cells.append("%.0f%%" % med([r["busy"] for r in rs]) if rs else "")
        print("| " + " | ".join(cells) + " |")
    bgs = [r["bg"] for r in recs if r["t"] == "iperf" and r["phase"] == phase and "bg" in r]
    if bgs:
        print()
        print("Machine busy: share of the %d vCPUs busy during a run (median); before each run the machine was at most %d%% busy over 2 s (QUIET=%d%%, waited up to %d s)%s." % (
            $(nproc), max(bgs), $QUIET, $QUIET_WAIT, "; **other work was running: the figures are suspect**" if max(bgs) >= $QUIET else ""))
    fp = [r for r in recs if r["t"] == "fastping" and r["phase"] == phase]
    if fp:
        print()
        print("ICMP ping %s s apart (%d probes): %s." % ("$FAST_INTERVAL", $PINGS, ", ".join(
            "%s %s" % (names[r["path"]], "%.3f ms (%.3f/%.3f)" % (r["avg"], r["min"], r["max"]) if "avg" in r else "error") for r in fp)))
    gp = [r for r in recs if r["t"] == "gping" and r["phase"] == phase]
    if gp:
        print()
        print("gridlink ping (the echo service, %d round trips on one connection between the same two nodes): %s." % ($PINGS, ", ".join(
            "%s %s" % (names[r["path"]], "%.3f ms (%.3f/%.3f) over %s" % (r["avg"], r["min"], r["max"], r.get("method")) if "avg" in r else "error: " + r.get("error", "")) for r in gp)))
    for r in (r for r in recs if r["t"] == "glstat" and r["phase"] == phase):
        d = {k: v for k, v in (r.get("drops") or {}).items() if v}
        print()
        print("%s after the phase: drops %s; peers %s." % (r["node"], json.dumps(d) if d else "none", json.dumps(r.get("peers"))))

print()
print("#### What gridlink vip must reach (issue 19), and the baselines in this run")
print()
print("| target | gridlink vip | baselines in this run |")
print("|---|---|---|")
tunnels = [p for p in paths if p not in ("plain",) and not p.startswith("gridlink")]
short = {"wireguard": "wireguard-go", "nebula": "Nebula", "nebula-tuned": "Nebula tuned"}
def each(fmt):
    return ", ".join("%s %s" % (short.get(p, p), fmt(p)) for p in tunnels)
have = "gridlink" in paths
verdict = lambda ok: "" if ok is None else (" **met**" if ok else " **missed**")
xf = lambda x: "%.2fx" % x if x is not None else "–"
for f in flows_list:
    vp = veth_plain.get(f)
    of = lambda x, y: pct(x / y) if x and y else "–"
    g = rate("clean", f, "gridlink") if have else None
    if have:
        rw, rn, rt = (med(paired("clean", f, "gridlink", d)) for d in ("wireguard", "nebula", "nebula-tuned"))
        ok = None if rw is None or rn is None or rt is None else (rw >= 1.0 and rn >= 2.0 and rt >= 2.0)
        gcell = "%s Mbit/s: %s wireguard-go, %s Nebula, %s Nebula tuned%s" % (f1(g), xf(rw), xf(rn), xf(rt), verdict(ok))
    else:
        gcell = "**not measured**"
    print("| clean link, -P %d: ≥ 1.0x wireguard-go; ≥ 2x Nebula | %s | Mbit/s: plain %s, %s |" % (
        f, gcell, f1(rate("clean", f, "plain")), each(lambda p: "%s (%s of plain)" % (f1(rate("clean", f, p)), pct(med(paired("clean", f, p)))))))
    if have:
        gv = rate("veth", f, "gridlink")
        gcell = "across the emulator %s of it%s; over the veth pair %s of it" % (of(g, vp), verdict(None if not g or not vp else g / vp >= 0.3), of(gv, vp))
    print("| clean link, -P %d: ≥ 30%% of the plain veth | %s | plain veth %s Mbit/s; across the emulator: plain %s, %s of it; over the veth pair: %s of it |" % (
        f, gcell, f1(vp), of(rate("clean", f, "plain"), vp), each(lambda p: of(rate("clean", f, p), vp)), each(lambda p: of(rate("veth", f, p), vp))))
    if have:
        w = med(paired("wan", f, "gridlink"))
        gcell = "%s Mbit/s, %s of plain%s" % (f1(rate("wan", f, "gridlink")), pct(w), verdict(None if w is None else w >= 0.9))
    print("| wan (%s, %s, %s loss), -P %d: ≥ 90%% of plain, same flows | %s | plain %s Mbit/s; %s of it |" % (
        "$RTT", "$RATE", "$LOSS", f, gcell, f1(rate("wan", f, "plain")), each(lambda p: pct(med(paired("wan", f, p))))))
pc = ping("clean", "plain")
def added_s(phase, path):
    p, q = ping(phase, path), ping(phase, "plain")
    return 1000 * (p["avg"] - q["avg"]) if p and q and "avg" in p and "avg" in q else None
def added(phase, path):
    a = added_s(phase, path)
    return "%+.0f µs" % a if a is not None else "–"
gcell = "**not measured**"
if have:
    a = added_s("clean", "gridlink")
    gcell = "clean link %s%s; over the veth pair %s; wan %s" % (added("clean", "gridlink"), verdict(None if a is None else a <= 100), added("veth", "gridlink"), added("wan", "gridlink"))
print("| ping over a direct shortcut ≤ plain + 100 µs | %s | clean link: plain %s ms, %s; over the veth pair: %s |" % (
    gcell, "%.3f" % pc["avg"] if pc and "avg" in pc else "–", each(lambda p: added("clean", p)), each(lambda p: added("veth", p))))
def gping(phase, path):
    return next((r for r in recs if r["t"] == "gping" and r["phase"] == phase and r["path"] == path), None)
gcell = "**not measured**"
if "gridlink-routed" in paths:
    cells = []
    for phase, _ in phases:
        p, q = ping(phase, "gridlink-routed"), gping(phase, "gridlink-routed")
        if p and q and "avg" in p and "avg" in q:
            r = p["avg"] / q["avg"] - 1
            fq = next((x for x in recs if x["t"] == "fastping" and x["phase"] == phase and x["path"] == "gridlink-routed" and "avg" in x), None)
            fr = " (ICMP %s s apart: %.3f ms, %+.1f%%%s)" % ("$FAST_INTERVAL", fq["avg"], 100 * (fq["avg"] / q["avg"] - 1), verdict(fq["avg"] / q["avg"] - 1 <= 0.05)) if fq else ""
            cells.append("%s: vip %.3f ms, gridlink ping %.3f ms (%s), %+.1f%%%s%s" % (phase, p["avg"], q["avg"], q.get("method"), 100 * r, verdict(r <= 0.05), fr))
        else:
            cells.append("%s: –" % phase)
    gcell = "; ".join(cells)
print("| ping, routed-only pair within 5%% of the routed round trip (gridlink ping, same pair) | %s | (gridlink's own: no peer has one) |" % gcell)
print()
print("\`\`\`sh")
print("FLOWS='$FLOWS' RUNS=$RUNS SECS=$SECS OMIT=$OMIT RTT=$RTT RATE=$RATE LOSS=$LOSS PINGS=$PINGS QUIET=$QUIET QUIET_WAIT=$QUIET_WAIT PATHS='$PATHS' NO_IPERF='$NO_IPERF' bench/vip.sh   # as root, idle machine; make deps build first")
print("\`\`\`")
PY
