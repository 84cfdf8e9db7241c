#!/bin/sh
# Runs a test suite in a network namespace of its own when it can (root, and unshare works): its
# loopback, its free ports and its test hosts (198.18.0.0/24 by veth) are then its own, so suites
# that each set up the same test addresses can run side by side. Elsewhere (an unprivileged user,
# a container without the capability) the suite runs as it is, as the suites skip what needs root.
# Usage: own_network.sh CMD [ARGS...]
if [ "$(id -u)" = 0 ] && unshare --net true 2>/dev/null; then
  exec unshare --net -- /bin/sh -c 'ip link set lo up && exec "$@"' own_network "$@"
fi
exec "$@"
