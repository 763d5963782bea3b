# Shared by the lab benchmark scripts (sourced, not run): the lab lock,
# the binaries, a scratch directory and teardown, and small helpers.
#
#   source "$(dirname "$0")/lib.sh"; bench_begin NAME "$@"
#
# bench_begin re-executes the script under flock on the lab lock of lab
# tests (/run/gridlab/test.lock, see internal/lab/labtest), held for the whole run;
# then it moves to the repository, sets BIN, GRIDLAB, GRIDLINK (absolute)
# and tmp (a scratch directory, removed at exit), and arranges that the
# processes in pids are killed and a lab the script brought up (ours=1) is
# torn down at exit, also on failure or Ctrl-C.

bench_begin() {
  local name=$1; shift
  BENCH_NAME=$name
  LOCK=${LOCK:-/run/gridlab/test.lock}
  if [ -z "${GRIDLINK_BENCH_LOCKED:-}" ]; then
    mkdir -p "$(dirname "$LOCK")"
    # -o: the lock stays with flock itself, not with daemons the run starts
    GRIDLINK_BENCH_LOCKED=1 exec flock -o "$LOCK" "$BASH" "$(realpath "$0")" "$@"
  fi
  cd "$(dirname "$0")/.."
  BIN=${BIN:-bin}
  GRIDLAB=${GRIDLAB:-$BIN/gridlab}
  GRIDLINK=$(realpath "${GRIDLINK:-$BIN/gridlink}")
  tmp=$(mktemp -d "/tmp/gridlink-$name.XXXXXX")
  pids=() ours=
  trap 'teardown; rm -rf "$tmp"' EXIT
  trap 'exit 130' INT TERM
}

teardown() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "$ours" ]; then $GRIDLAB down >/dev/null 2>&1 || true; ours=; fi
  pids=()
}

die() { echo "$BENCH_NAME.sh: $*" >&2; exit 1; }

within() { # SECONDS COMMAND...: retry COMMAND every 0.2 s until it succeeds
  local n=$(( $1 * 5 )); shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

listening() { $GRIDLAB exec "$1" -- ss -Hltn "sport = :$2" | grep -q .; } # HOST PORT
