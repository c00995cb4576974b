#!/usr/bin/env bash
# A job end to end on a dev cluster on this machine (ZooKeeper, nimbus, two supervisors, the UI, the logviewer), then kill,
# stop, and nothing left running. Ctrl-C at any point stops everything too.
#   demo.sh wordcount   (`make demo`)      the word count with `storm jar`, `storm list`, counts as they grow
#   demo.sh weblogs     (`make pipeline`)  the access-log pipeline with its Spark bolt, results checked
# Ports: storm.zookeeper.port 2181, nimbus.thrift.port 6627, ui.port 8080, logviewer.port 8000, slots from 6700
# (set SQUALL_DEMO_ZK_PORT, SQUALL_DEMO_NIMBUS_PORT, SQUALL_DEMO_UI_PORT and SQUALL_DEMO_LOGVIEWER_PORT to move
# the first four).
set -euo pipefail
cd "$(dirname "$0")/.."

job="${1:-wordcount}"
seconds="${SQUALL_DEMO_SECONDS:-20}"
lines="${SQUALL_DEMO_LINES:-20000}"
local_dir="$(mktemp -d)"
storm=(storm -c storm.local.dir="\"$local_dir\"" -c storm.zookeeper.port="${SQUALL_DEMO_ZK_PORT:-2181}"
       -c nimbus.thrift.port="${SQUALL_DEMO_NIMBUS_PORT:-6627}" -c ui.port="${SQUALL_DEMO_UI_PORT:-8080}"
       -c logviewer.port="${SQUALL_DEMO_LOGVIEWER_PORT:-8000}"
       -c squall.log.format=console)
cluster_pid=""

cleanup() {
  if [ -n "$cluster_pid" ] && kill -0 "$cluster_pid" 2>/dev/null; then
    kill -TERM "$cluster_pid"        # the dev cluster stops its daemons and their workers by pid
    wait "$cluster_pid" 2>/dev/null || true
  fi
  rm -rf "$local_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "storm dev-cluster --supervisors 2   (state and logs in $local_dir/dev-cluster)"
"${storm[@]}" dev-cluster --supervisors 2 > "$local_dir/dev-cluster.out" 2>&1 &
cluster_pid=$!
for _ in $(seq 1 300); do
  grep -q "Ctrl-C" "$local_dir/dev-cluster.out" 2>/dev/null && break
  kill -0 "$cluster_pid" 2>/dev/null || { cat "$local_dir/dev-cluster.out"; exit 1; }
  sleep 0.2
done
sed -n '/^Squall dev cluster/,$p' "$local_dir/dev-cluster.out"

wordcount() {
  step "storm jar examples/wordcount.py"
  "${storm[@]}" jar examples/wordcount.py

  step "storm list"
  "${storm[@]}" list

  step "word counts for ${seconds}s (each count task logs its totals every 5 s)"
  logs=()
  for _ in $(seq 1 150); do
    mapfile -t logs < <(ls "$local_dir"/dev-cluster/logs/*worker*.log 2>/dev/null || true)
    [ "${#logs[@]}" -ge 2 ] && break
    sleep 0.2
  done
  timeout "$seconds" tail -q -n +1 -F "${logs[@]}" 2>/dev/null | grep -a --line-buffered 'word counts' || true

  step "storm list"
  "${storm[@]}" list

  step "Storm's UI REST API: GET http://127.0.0.1:${SQUALL_DEMO_UI_PORT:-8080}/api/v1/topology/summary"
  python - "http://127.0.0.1:${SQUALL_DEMO_UI_PORT:-8080}/api/v1/topology/summary" <<'PY'
import json, sys, urllib.request
print(json.dumps(json.load(urllib.request.urlopen(sys.argv[1], timeout=30)), indent=2))
PY

  step "storm kill wordcount -w 1"
  "${storm[@]}" kill wordcount -w 1
}

weblogs() {
  out="$local_dir/weblogs"
  step "storm jar examples/weblogs.py $out $lines   (access log -> parse -> Spark SQL windows -> JSON lines)"
  "${storm[@]}" jar examples/weblogs.py "$out" "$lines"

  step "storm list"
  "${storm[@]}" list

  step "waiting for all $lines lines in the results (the Spark worker starts its JVM first: ~15 s)"
  python -m examples.weblogs wait "$out" "$lines" 300

  step "python -m examples.weblogs report $out   (the newest windows; files: $out/*.jsonl)"
  python -m examples.weblogs report "$out"
  head -n 2 "$out"/invalid-*.jsonl

  step "storm kill weblogs -w 1"
  "${storm[@]}" kill weblogs -w 1
}

case "$job" in
  wordcount|weblogs) "$job" ;;
  *) echo "usage: $0 [wordcount|weblogs]" >&2; exit 2 ;;
esac

step "storm dev-cluster stop"
"${storm[@]}" dev-cluster stop
wait "$cluster_pid" || true
cluster_pid=""
echo "done: nothing left running"
