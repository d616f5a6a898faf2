#!/usr/bin/env bash
# A test bed of N "hosts" on one machine: Linux network namespaces kiln-h0..kiln-h(N-1),
# each with its own loopback and one veth (kiln0, 10.213.0.(i+1)/24) into a bridge that
# lives in a namespace of its own (kiln-bed, 10.213.0.254). The root namespace is not
# touched: no route, no NAT, no forwarding, so nothing leaves the bed. mpirun runs inside
# kiln-bed and starts its daemons through scripts/netns_agent.sh instead of ssh.
#
#   scripts/hosts.sh up N        make (or remake) the bed; prints the hostfile path
#   scripts/hosts.sh down        remove everything of the bed (also after a failed up)
#   scripts/hosts.sh hostfile N [slots]   write an Open MPI hostfile for N hosts
#   scripts/hosts.sh mpirun ARGS...       mpirun inside the bed with the TCP-only settings
#   scripts/hosts.sh kill HOST   take one host down as a crash would (link cut, processes killed)
#   scripts/hosts.sh status      list the bed's namespaces and addresses
#
# Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) and iproute2.
set -euo pipefail

PREFIX=${KILN_BED_PREFIX:-kiln-h}
BED=${KILN_BED_NS:-kiln-bed}
NET=${KILN_BED_NET:-10.213.0}          # a /24 of the project's own
STATE=${KILN_BED_DIR:-/tmp/kiln-bed}  # hostfile and MCA settings
HERE=$(cd "$(dirname "$0")" && pwd)

die() { echo "hosts.sh: $*" >&2; exit 1; }

ns_list() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^(${PREFIX}[0-9]+|${BED})$" || true; }

check_free() {
  # Refuse to shadow addresses something on the machine already uses.
  if ip -4 addr show 2>/dev/null | grep -q "inet ${NET}\."; then
    die "${NET}.0/24 is already used in the root namespace; set KILN_BED_NET to a free /24 (e.g. 10.214.0)"
  fi
  if ip -4 route show 2>/dev/null | grep -q "^${NET}\."; then
    die "the root namespace routes ${NET}.0/24; set KILN_BED_NET to a free /24"
  fi
}

down() {
  local ns pid
  for ns in $(ns_list); do
    # A namespace outlives `ip netns del` while processes sit in it: end them first.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null || true   # only when empty: made by up, nobody else's
  rm -rf "$STATE"
}

take_down() {
  # A host lost as a machine is: its link goes first (peers see silence, not a reset), then its processes.
  local ns=$1 i=${1#"$PREFIX"} pid
  ip -n "$BED" link del "vh$i" 2>/dev/null || true
  mkdir -p "$STATE/down" && touch "$STATE/down/$ns"   # its launch agent now hangs as ssh would (netns_agent.sh)
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "/etc/netns/$ns"
}

write_hostfile() {
  local n=$1 slots=${2:-2} i
  mkdir -p "$STATE"
  : > "$STATE/hostfile"
  for ((i = 0; i < n; i++)); do echo "${PREFIX}${i} slots=${slots}" >> "$STATE/hostfile"; done
  echo "$STATE/hostfile"
}

write_mca() {
  # TCP between ranks and for the daemons' out-of-band channel, on the bed's /24 only;
  # pml: ob1 (over the btls), never UCX or cm, which would use shared memory across namespaces;
  # ^ rather than "ob1" leaves Open MPI's monitoring pml available (bench/dist_bench.py counts bytes with it).
  # mpi_yield_when_idle: the hosts share this machine's cores, which Open MPI cannot see (one rank per
  # "node"); a blocked rank that spins without yielding made an 8-byte round trip 13.7 ms instead of 19 us.
  mkdir -p "$STATE"
  cat > "$STATE/mca.conf" <<EOF
plm_rsh_agent = ${HERE}/netns_agent.sh
pml = ^ucx,cm
btl = tcp,self
btl_tcp_if_include = ${NET}.0/24
oob_tcp_if_include = ${NET}.0/24
osc = ^ucx
coll = ^sm,han
mpi_yield_when_idle = 1
EOF
}

up() {
  local n=$1 i ns
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 200 ]] || die "up needs a host count 1..200, got '$n'"
  [ "$(id -u)" = 0 ] || die "needs root to make network namespaces"
  down
  check_free
  trap 'echo "hosts.sh: up failed; removing the partial bed" >&2; down' ERR
  ip netns add "$BED"
  ip -n "$BED" link set lo up
  ip -n "$BED" link add br0 type bridge
  ip -n "$BED" addr add "${NET}.254/24" dev br0
  ip -n "$BED" link set br0 up
  mkdir -p "/etc/netns/$BED"
  : > "/etc/netns/$BED/hosts"
  echo "127.0.0.1 localhost" >> "/etc/netns/$BED/hosts"
  for ((i = 0; i < n; i++)); do
    ns="${PREFIX}${i}"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Made in the bed's namespace and one end moved: no interface ever appears in the root one.
    ip -n "$BED" link add "vh$i" type veth peer name kiln0 netns "$ns"
    ip -n "$BED" link set "vh$i" master br0 up
    ip -n "$ns" addr add "${NET}.$((i + 1))/24" dev kiln0
    ip -n "$ns" link set kiln0 up
    echo "${NET}.$((i + 1)) $ns" >> "/etc/netns/$BED/hosts"
  done
  # Every namespace resolves the host names the same way (ip netns exec binds /etc/netns/NS/hosts).
  for ((i = 0; i < n; i++)); do
    mkdir -p "/etc/netns/${PREFIX}${i}"
    cp "/etc/netns/$BED/hosts" "/etc/netns/${PREFIX}${i}/hosts"
  done
  write_hostfile "$n" >/dev/null
  write_mca
  trap - ERR
  echo "$STATE/hostfile"
}

case "${1:-}" in
  up) up "${2:-2}" ;;
  down) down ;;
  kill) [[ "${2:-}" == "$PREFIX"* ]] || die "kill needs a host name such as ${PREFIX}1"; take_down "$2" ;;
  hostfile) write_hostfile "${2:-2}" "${3:-2}" ;;
  mpirun)
    shift
    [ -f "$STATE/mca.conf" ] || die "the bed is down; run scripts/hosts.sh up N first"
    # PMIX_MCA_gds=hash: PMIx 3's shared-memory store logs spurious dstore errors when jobs follow each other.
    exec ip netns exec "$BED" env OMPI_MCA_mca_base_param_files="$STATE/mca.conf" PMIX_MCA_gds=hash mpirun "$@" ;;
  status)
    for ns in $(ns_list); do echo "$ns: $(ip -n "$ns" -4 -br addr | grep -v '^lo' | awk '{print $1, $3}' | tr '\n' ' ')"; done ;;
  *) die "usage: $0 up N | down | kill HOST | hostfile N [slots] | mpirun ARGS... | status" ;;
esac
