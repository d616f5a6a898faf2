#!/usr/bin/env bash
# Open MPI's launch agent (plm_rsh_agent) for the test bed of scripts/hosts.sh: where ssh would
# log in to HOST and run the daemon's command line in a shell, this runs it in the network
# namespace named HOST. Like ssh it starts from a bare login environment, so the programs get
# only what mpirun -x forwards, as they would on real machines.
#
# A host taken down (hosts.sh kill) leaves a mark: ssh to a machine that vanished does not
# return, it hangs until a keepalive gives up, so neither does this; mpirun then learns of the
# loss from the surviving ranks (kiln's KILN_DIST_TIMEOUT), not from a daemon's exit.
set -uo pipefail
while [[ "${1:-}" == -* ]]; do shift; done   # ssh-style options (-x, -q ...) mean nothing here
host=${1:?netns_agent.sh: no host given}
shift
ip netns list | awk '{print $1}' | grep -qx "$host" ||
  { echo "netns_agent.sh: no namespace '$host' (is the bed up? scripts/hosts.sh up N)" >&2; exit 255; }
# A /tmp of its own, as a machine has: the daemons' session directories (named by the hostname, which all
# hosts here share) would otherwise race to create the same folder ("mkdir ... File exists", orte_init failed).
tmp="${KILN_BED_DIR:-/tmp/kiln-bed}/tmp/$host"
mkdir -p "$tmp"
env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME="${HOME:-/root}" LANG=C.UTF-8 TMPDIR="$tmp" \
  ${PMIX_MCA_gds:+PMIX_MCA_gds=$PMIX_MCA_gds} \
  ip netns exec "$host" /bin/sh -c "$*" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP   # mpirun ending its "ssh" ends the daemon
wait "$child"
rc=$?
if [ -e "${KILN_BED_DIR:-/tmp/kiln-bed}/down/$host" ]; then
  trap - TERM INT HUP
  while kill -0 "$PPID" 2>/dev/null; do sleep 1; done   # held until mpirun goes
fi
exit "$rc"
