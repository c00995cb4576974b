#!/usr/bin/env bash
# The main job, as far as it goes today: bring up a local ZooKeeper with `storm dev-zookeeper`,
# show it is reachable (zkCli.sh and the `srvr` four-letter word), then stop it.
set -euo pipefail
port="${SQUALL_DEMO_ZK_PORT:-2181}"
local_dir="$(mktemp -d)"
trap 'kill -TERM "$zk_pid" 2>/dev/null || true; wait "$zk_pid" 2>/dev/null || true; rm -rf "$local_dir"' EXIT

storm -c storm.zookeeper.port="$port" -c storm.local.dir="$local_dir" dev-zookeeper &
zk_pid=$!
for _ in $(seq 1 100); do
  python3 -c "from squall.devzk import is_serving; import sys; sys.exit(0 if is_serving('127.0.0.1', $port) else 1)" && break
  sleep 0.2
done

echo "--- zkCli.sh -server 127.0.0.1:$port ls /"
/usr/share/zookeeper/bin/zkCli.sh -server "127.0.0.1:$port" ls / 2>/dev/null | tail -n 1
echo "--- srvr"
python3 -c "from squall.devzk import four_letter; print(four_letter('127.0.0.1', $port, 'srvr'))"
