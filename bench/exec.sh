#!/usr/bin/env bash
# gridlink exec against ssh and gridlink nc (issue 21), for BENCHMARKS.md
# (needs root). On the `wan` topology (hosts a and b, one emulated link of
# RTT and RATE), b runs a node agent with the exec service and an OpenSSH
# server (keys made for the run, strict known_hosts); a runs a node agent
# admitted by the lab CA, whose node certificate b's grid-mapfile maps to
# root. In the same run:
#   start-up  N times each, one after another: `gridlink exec b true` and
#             `ssh b true` (wall time, from a, the client's own start
#             included: the time to the command's end, which for true is
#             its first and only output); medians
#   stdin     MIB MiB of zeros from a pipe, RUNS times each: into
#             `gridlink exec b 'cat >/dev/null'` and into `gridlink nc
#             b:9` (every agent's sink); rates from the first byte to the
#             end, start-up included for both; medians, and exec's ratio
#             to nc (issue 21's target: 0.9 or more)
# Prints markdown. Everything runs inside lab namespaces; the lab lock of
# lab tests is held for the whole run, the lab torn down at the end.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
bench_begin exec "$@"

RTT=${RTT:-10ms}
RATE=${RATE:-1gbit}
N=${N:-15}
MIB=${MIB:-256}
RUNS=${RUNS:-3}
HUB=198.51.100.10:7946 # wan: host a

bg() { # HOST LOG COMMAND...: run in the background in HOST
  local h=$1 log=$2; shift 2
  $GRIDLAB exec "$h" -- "$@" >"$tmp/$log.log" 2>&1 &
  pids+=($!)
}

$GRIDLAB down >/dev/null 2>&1 || true
ours=1
$GRIDLAB up wan --set rtt="$RTT" --set rate="$RATE" >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; die "gridlab up failed"; }
B=$($GRIDLAB exec b -- ip -4 -o addr show scope global | awk '{split($4, a, "/"); print a[1]; exit}')

# b: sshd with the run's keys, listening on its address only
ssh-keygen -q -t ed25519 -N '' -f "$tmp/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/id"
cp "$tmp/id.pub" "$tmp/authorized_keys"
echo "$B $(cat "$tmp/host_key.pub")" >"$tmp/known_hosts"
cat >"$tmp/sshd_config" <<EOF
ListenAddress $B:22
HostKey $tmp/host_key
AuthorizedKeysFile $tmp/authorized_keys
PidFile none
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
UseDNS no
EOF
mkdir -p /run/sshd
bg b sshd "$(command -v sshd || echo /usr/sbin/sshd)" -D -e -f "$tmp/sshd_config"
SSH=(ssh -F /dev/null -i "$tmp/id" -o UserKnownHostsFile="$tmp/known_hosts" -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes
  -o BatchMode=yes -o GSSAPIAuthentication=no "root@$B")

# the overlay, admitted by the lab CA; b maps a's node certificate to root
echo "\"/O=gridlab/OU=node/CN=a\" root" >"$tmp/grid-mapfile"
bg a hub "$GRIDLINK" hub --name a --listen 0.0.0.0:7946 $($GRIDLAB cert --role hub a)
within 10 $GRIDLAB exec a -- "$GRIDLINK" status --hub || die "hub did not start: $(cat "$tmp/hub.log")"
bg a node-a "$GRIDLINK" node --name a --hub "$HUB" $($GRIDLAB cert a)
bg b node-b "$GRIDLINK" node --name b --hub "$HUB" $($GRIDLAB cert b) --allow-exec --grid-mapfile "$tmp/grid-mapfile"
within 20 $GRIDLAB exec a -- "$GRIDLINK" exec b true || die "exec a -> b: $(cat "$tmp"/node-*.log)"
within 10 $GRIDLAB exec a -- "${SSH[@]}" true || die "ssh a -> b: $(cat "$tmp/sshd.log")"

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
on_a() { # COMMAND...: wall seconds of COMMAND in a (gridlab exec's own start left out: timed inside)
  $GRIDLAB exec a -- bash -c 't0=$(date +%s.%N); "$@" >/dev/null || exit 1; awk -v a="$t0" -v z="$(date +%s.%N)" "BEGIN {print z - a}"' - "$@"
}

declare -A times
for i in $(seq "$N"); do
  times[exec]="${times[exec]:-} $(on_a "$GRIDLINK" exec b true)"
  times[ssh]="${times[ssh]:-} $(on_a "${SSH[@]}" true)"
done

declare -A rates
for r in $(seq "$RUNS"); do
  for way in exec nc; do
    case $way in
      exec) s=$($GRIDLAB exec a -- bash -c 't0=$(date +%s.%N); head -c "$1"M /dev/zero | "$2" exec b "cat >/dev/null" || exit 1; awk -v a="$t0" -v z="$(date +%s.%N)" "BEGIN {print z - a}"' - "$MIB" "$GRIDLINK") ;;
      nc) s=$($GRIDLAB exec a -- bash -c 't0=$(date +%s.%N); head -c "$1"M /dev/zero | "$2" nc b:9 >/dev/null || exit 1; awk -v a="$t0" -v z="$(date +%s.%N)" "BEGIN {print z - a}"' - "$MIB" "$GRIDLINK") ;;
    esac
    rate=$(awk -v s="$s" -v m="$MIB" 'BEGIN {printf "%.1f", m * 8 * 1.048576 / s}')
    rates[$way]="${rates[$way]:-} $rate"
    echo "run $r $way: $s s, $rate Mbit/s" >&2
  done
done

echo "wan rtt=$RTT rate=$RATE; start-up: $N runs each, one after another; stdin: $MIB MiB, $RUNS runs each"
echo
echo "| start-up (a to b) | runs (ms) | median (ms) |"
echo "|---|---|---|"
for way in exec ssh; do
  ms=$(tr ' ' '\n' <<<"${times[$way]}" | grep . | awk '{printf " %.0f", $1 * 1000}')
  m=$(median <<<"${times[$way]}")
  label="gridlink exec b true"
  [ "$way" = ssh ] && label="ssh b true"
  awk -v l="$label" -v r="$ms" -v m="$m" 'BEGIN {printf "| %s |%s | %.1f |\n", l, r, m * 1000}'
done
echo
echo "| stdin (a to b) | runs (Mbit/s) | median (Mbit/s) | ratio to nc |"
echo "|---|---|---|---|"
base=$(median <<<"${rates[nc]}")
for way in exec nc; do
  m=$(median <<<"${rates[$way]}")
  label="gridlink exec b 'cat >/dev/null'"
  [ "$way" = nc ] && label="gridlink nc b:9 (the agent's sink)"
  awk -v l="$label" -v r="${rates[$way]}" -v m="$m" -v b="$base" 'BEGIN {printf "| %s |%s | %.1f | %.3f |\n", l, r, m, m / b}'
done
