#!/usr/bin/env bash
# Installs what Squall needs from Debian when it is missing: Java (ZooKeeper, Spark) and the zookeeper
# package (a real ZooKeeper for `storm dev-zookeeper` and the tests); with --for-tests also docker-compose
# (tests/test_deploy.py validates docker-compose.yml with it; no Docker engine needed). Safe to run repeatedly.
set -euo pipefail

missing=()
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
[ -e /usr/share/java/zookeeper.jar ] || [ -n "${SQUALL_ZOOKEEPER_CLASSPATH:-}" ] || missing+=(zookeeper)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${1:-}" = "--for-tests" ]; then
  command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing from Debian: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
