#!/usr/bin/env bash
# Open MPI's launch agent (plm_rsh_agent) for the test bed of scripts/hosts.sh: where
# ssh would log in to HOST and run the daemon's command line in a shell, this runs it in
# the network namespace named HOST. Like ssh it starts from a bare login environment, so
# the programs get only what mpirun -x forwards, as they would on real machines.
set -euo pipefail
while [[ "${1:-}" == -* ]]; do shift; done   # ssh-style options (-x, -q ...) mean nothing here
host=${1:?netns_agent.sh: no host given}
shift
ip netns list | awk '{print $1}' | grep -qx "$host" ||
  { echo "netns_agent.sh: no namespace '$host' (is the bed up? scripts/hosts.sh up N)" >&2; exit 255; }
exec env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME="${HOME:-/root}" LANG=C.UTF-8 \
  ip netns exec "$host" /bin/sh -c "$*"
