#!/usr/bin/env bash
# Installs what Squall needs from Debian when it is missing, and says what and why before it does: Java (ZooKeeper,
# Spark), the zookeeper package (a real ZooKeeper for `storm dev-zookeeper`, `storm dev-cluster` and the tests) and
# python3-venv; with --for-tests also docker-compose (tests/test_deploy.py validates docker-compose.yml with it; no
# Docker engine needed), iproute2 (tests/test_partition_cluster.py's network namespaces) and chromium with
# chromium-driver (tests/test_ui_browser.py drives the UI's pages in headless Chromium; no browser is downloaded)
# and nodejs (tests/test_multilang.py runs a Node.js bolt speaking Storm's multilang protocol).
# SQUALL_NO_INSTALL=1 lists what is missing and stops (exit 1) instead of installing.
# Safe to run repeatedly: nothing is printed or installed when nothing is missing.
set -euo pipefail

missing=()
reasons=()
need() { missing+=("$1"); reasons+=("$1: $2"); }
command -v java >/dev/null 2>&1 || need default-jre-headless "Java, for ZooKeeper and Spark"
[ -e /usr/share/java/zookeeper.jar ] || [ -n "${SQUALL_ZOOKEEPER_CLASSPATH:-}" ] \
  || need zookeeper "a real ZooKeeper for storm dev-zookeeper, storm dev-cluster and the tests"
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need python3-venv "the .venv virtualenv"
if [ "${1:-}" = "--for-tests" ]; then
  command -v docker-compose >/dev/null 2>&1 \
    || need docker-compose "the tests validate docker-compose.yml with it (no Docker engine needed)"
  command -v ip >/dev/null 2>&1 \
    || need iproute2 "the partition test puts supervisor hosts in network namespaces (ip netns)"
  command -v chromium >/dev/null 2>&1 \
    || need chromium "headless Chromium: the UI test clicks through the pages in it"
  command -v chromedriver >/dev/null 2>&1 \
    || need chromium-driver "the WebDriver through which the UI test (selenium) drives Chromium"
  command -v node >/dev/null 2>&1 \
    || need nodejs "the multilang test runs a Node.js bolt speaking Storm's multilang protocol"
fi
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo "
command="${sudo}apt-get install --no-install-recommends ${missing[*]}"
echo "Squall needs these Debian packages, missing on this machine:"
printf '  %s\n' "${reasons[@]}"
if [ "${SQUALL_NO_INSTALL:-}" = 1 ]; then
  echo "SQUALL_NO_INSTALL=1: not installing them. Install them with: $command" >&2
  exit 1
fi
echo "installing them: ${sudo}apt-get update; $command   (SQUALL_NO_INSTALL=1 lists them and stops instead)"
export DEBIAN_FRONTEND=noninteractive
${sudo}apt-get update -qq
${sudo}apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "installed: ${missing[*]}"
