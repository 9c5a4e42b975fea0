#!/usr/bin/env bash
# background.sh SHARES COMMAND...: COMMAND (and every process it starts) in a CPU cgroup of
# its own with SHARES of CPU weight (cgroup v1 cpu.shares, where 1024 is a plain process's
# and each node of the test cluster's); under cgroup v2, cpu.weight SHARES/10.24. Used by
# make test for the tests beside the cluster's: the cluster's nodes are cgroups of 1024
# shares each, so a niced process beside them (nice weighs only within one cgroup) still
# takes a whole node's share per process; in a cgroup of its own the lane as a whole takes
# SHARES when the cluster wants the cores, and all that they leave idle otherwise.
# Without a writable cgroup hierarchy COMMAND runs niced, as before.
#   background.sh --stop   every process still in that cgroup gets SIGKILL (a run that stops
#                          early: the lane's pytest and the TensorFlow processes it started)
set -euo pipefail
name="syncreplicas-background"
if [[ "${1:-}" == --stop ]]; then
  for procs in "/sys/fs/cgroup/cpu/$name/cgroup.procs" "/sys/fs/cgroup/$name/cgroup.procs"; do
    [[ -f $procs ]] && xargs -r kill -KILL < "$procs" 2>/dev/null || true
  done
  exit 0
fi
shares="$1"; shift
if [[ -w /sys/fs/cgroup/cpu/cgroup.procs ]]; then
  group="/sys/fs/cgroup/cpu/$name"
  mkdir -p "$group"
  echo "$shares" > "$group/cpu.shares"
  echo $$ > "$group/cgroup.procs"
elif [[ -f /sys/fs/cgroup/cgroup.controllers && -w /sys/fs/cgroup/cgroup.procs ]] \
    && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
  group="/sys/fs/cgroup/$name"
  mkdir -p "$group"
  echo $(( shares * 100 / 1024 > 0 ? shares * 100 / 1024 : 1 )) > "$group/cpu.weight"
  echo $$ > "$group/cgroup.procs"
else
  exec nice -n 5 "$@"
fi
exec "$@"
