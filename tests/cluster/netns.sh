#!/usr/bin/env bash
# netns.sh up|down|exec|ns|addr|list - a test bed of 3 "hosts" on one machine, made of Linux
# network namespaces, for the multi-host jobs of tests/cluster (see README.md there).
#
#   netns.sh up                 make the bed (fails, after removing what it made, if anything
#                               goes wrong; exits 77 with a reason if the kernel or the
#                               sandbox refuses network namespaces at all)
#   netns.sh down               remove the bed: stops every process still inside one of its
#                               namespaces (by pid), deletes the namespaces (which deletes the
#                               veth pairs and the bridge); idempotent
#   netns.sh exec HOST CMD...   run CMD inside HOST (h1, h2, h3, or the host's address), with
#                               the host name hK (its own UTS namespace, made per command)
#   netns.sh ns HOST            the namespace name of HOST     netns.sh addr HOST   its address
#   netns.sh list               the bed's namespaces, if it exists
#
# Layout (nothing is added to the root namespace: no link, address or route):
#
#   namespace flt-$ID-sw:  bridge br0 with ports h1 h2 h3 (no address)
#   namespace flt-$ID-hK:  eth0 = $NET.K/24 (veth peer of port hK), lo up;
#                          /etc/hosts inside it (ip netns exec binds /etc/netns/NS/hosts) names
#                          h1 h2 h3 with their addresses
#
# Environment:
#   CLUSTER_ID     makes the names unique, so two beds never collide (default: "manual";
#                  tests/cluster/run.sh sets the CI job id and its pid). Letters, digits, '-'.
#   CLUSTER_NET    the first three octets of the private /24 (default 10.213.7); it only
#                  exists inside the namespaces, and `up` refuses one that the root namespace
#                  routes or holds, so nothing here can shadow a real network.
#   CLUSTER_HOSTS  number of hosts (default 3, at most 250)
#   RATE           e.g. 1gbit or 100mbit: each host's eth0 gets a token-bucket qdisc
#                  (tc tbf: that rate, a burst of 10 ms of it, 50 ms queue)
set -euo pipefail
id=${CLUSTER_ID:-manual}
net=${CLUSTER_NET:-10.213.7}
nh=${CLUSTER_HOSTS:-3}
prefix=flt-$id
sw=$prefix-sw

die() { echo "netns.sh: $*" >&2; exit 1; }
[[ $id =~ ^[A-Za-z0-9-]{1,40}$ ]] || die "CLUSTER_ID '$id' must be 1..40 letters, digits or '-'"
[[ $net =~ ^10\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "CLUSTER_NET '$net' must be the first three octets of a 10.x.y.0/24"
[[ $nh =~ ^[0-9]+$ ]] && [ "$nh" -ge 1 ] && [ "$nh" -le 250 ] || die "CLUSTER_HOSTS '$nh' must be 1..250"

# HOST (hK or an address of the bed) -> K
host_index() {
  case "$1" in
    h[0-9]*) k=${1#h} ;;
    "$net".*) k=${1#"$net".} ;;
    *) die "unknown host '$1' (expected h1..h$nh or $net.1..$net.$nh)" ;;
  esac
  [[ $k =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le "$nh" ] || die "unknown host '$1' (expected h1..h$nh)"
  echo "$k"
}

ours() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(sw|h[0-9]+)\$" || true; }

# Stops the processes inside namespace $1 (TERM, up to 3 s, then KILL), each by its pid.
stop_pids() {
  local ns=$1 pids i
  for i in $(seq 30); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    if [ "$i" -lt 30 ]; then kill -TERM $pids 2>/dev/null || true; else kill -KILL $pids 2>/dev/null || true; fi
    sleep 0.1
  done
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
}

down() {
  local ns
  for ns in $(ours); do
    stop_pids "$ns"
    ip netns del "$ns" 2>/dev/null || ip netns del "$ns"
  done
  rm -rf /etc/netns/"$prefix"-h* /etc/netns/"$sw"
  rmdir /etc/netns 2>/dev/null || true
  return 0
}

# tbf needs a burst of at least rate/HZ; 10 ms of the rate (at least 16 KiB) is enough.
tbf_args() {
  local r=$1 v u bits
  [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "RATE '$r' must be a number followed by bit, kbit, mbit or gbit"
  v=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
  case $u in bit) bits=$v ;; kbit) bits=$((v * 1000)) ;; mbit) bits=$((v * 1000000)) ;; gbit) bits=$((v * 1000000000)) ;; esac
  local burst=$((bits / 8 / 100))
  [ "$burst" -lt 16384 ] && burst=16384
  echo "rate $r burst $burst latency 50ms"
}

undo_on_failure() {
  local rc=$?
  [ $rc -eq 0 ] && return 0
  echo "netns.sh: up failed; removing what it made" >&2
  down
}

up() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth, bridge)"
  command -v ip >/dev/null || die "no 'ip' command (Debian package iproute2)"
  local err
  if [ -n "$(ours)" ]; then die "a bed named $prefix-* already exists (netns.sh down, or another CLUSTER_ID)"; fi
  if ip -4 route show table all match "$net.0/24" | grep -vqE '^(default|broadcast|local) ' ||
     ip -4 addr show | grep -qF "inet $net."; then
    die "$net.0/24 is routed or assigned in this namespace; choose another CLUSTER_NET"
  fi
  if ! err=$(ip netns add "$sw" 2>&1); then
    case $err in
      *"Operation not permitted"* | *"Function not implemented"*)
        echo "SKIP: network namespaces are not available here (ip netns add: $err)"; exit 77 ;;
    esac
    die "ip netns add $sw: $err"
  fi
  trap 'undo_on_failure' EXIT
  trap 'exit 130' INT TERM HUP
  local tbf=""
  [ -n "${RATE:-}" ] && tbf=$(tbf_args "$RATE")
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge stp_state 0
  ip -n "$sw" link set br0 up
  local k h hosts=""
  for k in $(seq "$nh"); do hosts+="$net.$k h$k"$'\n'; done
  for k in $(seq "$nh"); do
    h=$prefix-h$k
    ip netns add "$h"
    ip -n "$sw" link add "h$k" type veth peer name eth0 netns "$h"
    ip -n "$sw" link set "h$k" master br0
    ip -n "$sw" link set "h$k" up
    ip -n "$h" link set lo up
    ip -n "$h" addr add "$net.$k/24" dev eth0
    ip -n "$h" link set eth0 up
    # shellcheck disable=SC2086
    [ -n "$tbf" ] && tc -n "$h" qdisc add dev eth0 root tbf $tbf
    mkdir -p /etc/netns/"$h"
    printf '127.0.0.1 localhost\n%s' "$hosts" >/etc/netns/"$h"/hosts
  done
  # every port forwarding (no STP, so at once) and every host link up
  for k in $(seq 50); do
    local n
    n=$(bridge -n "$sw" link show | grep -c "state forwarding" || true)
    [ "$n" -eq "$nh" ] && break
    sleep 0.1
  done
  [ "$n" -eq "$nh" ] || die "only $n of $nh bridge ports are forwarding"
  trap - EXIT INT TERM HUP
  echo "netns.sh: $nh hosts up: $(for k in $(seq "$nh"); do printf '%s=%s.%s ' "$prefix-h$k" "$net" "$k"; done)${RATE:+(tbf rate $RATE)}"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) up ;;
  down) down ;;
  exec)
    [ $# -ge 2 ] || die "usage: netns.sh exec HOST CMD..."
    k=$(host_index "$1"); shift
    exec ip netns exec "$prefix-h$k" unshare --uts sh -c 'hostname "$0" && exec "$@"' "h$k" "$@" ;;
  ns) [ $# -eq 1 ] || die "usage: netns.sh ns HOST"; echo "$prefix-h$(host_index "$1")" ;;
  addr) [ $# -eq 1 ] || die "usage: netns.sh addr HOST"; echo "$net.$(host_index "$1")" ;;
  list) ours ;;
  *) echo "usage: netns.sh up|down|exec HOST CMD...|ns HOST|addr HOST|list  (see the top of this file)" >&2; exit 2 ;;
esac
