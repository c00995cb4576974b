"""The deployment files stay valid: docker-compose.yml, the example storm.yaml files, zoo.cfg, the Dockerfile.

Nobody runs `docker-compose up` in CI (there is no Docker engine), so a typo there would first show on a
user's machine. `docker-compose config` needs no engine: it parses and validates the file, and prints it
resolved, which we then check for what the cluster relies on (health checks, start order, hostnames).
docker-compose comes from Debian via deploy/install-system-deps.sh (`make test` runs it): a missing one
fails these tests rather than skipping them, so CI cannot silently stop checking.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.core.config.loading import load_config, parse_override
from squall.core.config.validation import unknown_keys

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKER_CONF = REPO / "deploy" / "docker" / "storm.yaml"
CLUSTER_CONF = REPO / "deploy" / "storm-cluster.yaml"
ZOO_CFG = REPO / "deploy" / "zoo.cfg"
SERVICES = ("zookeeper", "nimbus", "supervisor-1", "supervisor-2", "ui")
SUPERVISORS = ("supervisor-1", "supervisor-2")


def compose(*args: str) -> subprocess.CompletedProcess[str]:
    """Run docker-compose on the repo's compose file (never needs the Docker engine for `config`)."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed: run deploy/install-system-deps.sh --for-tests (make test does)")
    return subprocess.run([exe, "-f", str(COMPOSE_FILE), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    """The resolved compose file's services, as docker-compose itself understands them."""
    result = compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """{container path: (source, read_only)}; 1.29 prints "src:dst:mode" strings, compose v2 mappings."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            source, target, *mode = v.split(":")
            out[target] = (source, mode == ["ro"])
        else:
            out[v["target"]] = (v.get("source", ""), bool(v.get("read_only")))
    return out


# --- docker-compose.yml -------------------------------------------------------------------------------


def test_compose_file_validates() -> None:
    result = compose("config", "-q")
    assert result.returncode == 0, result.stderr


def test_compose_has_the_cluster_services_each_with_a_healthcheck(services: dict[str, Any]) -> None:
    assert set(SERVICES) <= set(services)
    for name in SERVICES:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_nimbus_publishes_its_thrift_port(services: dict[str, Any]) -> None:
    ports = {(str(p["published"]), int(p["target"])) for p in services["nimbus"]["ports"]}
    assert ("6627", 6627) in ports


def test_the_ui_publishes_storms_ui_port_and_reads_the_docker_conf(services: dict[str, Any]) -> None:
    ui = services["ui"]
    assert {(str(p["published"]), int(p["target"])) for p in ui["ports"]} == {("8080", 8080)}
    assert ui["command"] == ["ui"] and load_config(DOCKER_CONF, env={})["ui.port"] == 8080
    assert mounts(ui)["/etc/squall/storm.yaml"] == (str(DOCKER_CONF), True), "nimbus.seeds from the docker conf"


def test_each_supervisor_host_has_a_logviewer_reading_its_logs(services: dict[str, Any]) -> None:
    """The UI links a worker to http://<its host>:<logviewer.port>/...: the logviewer must answer in the
    supervisor's network on that port, reading the supervisor's own volume, where it writes its own
    logviewer.log (a daemon that cannot write its log stops)."""
    port = load_config(DOCKER_CONF, env={})["logviewer.port"]
    for n, supervisor in enumerate(SUPERVISORS, start=1):
        viewer = services[f"logviewer-{n}"]
        assert viewer["command"] == ["logviewer"]
        assert viewer["network_mode"] == f"service:{supervisor}"
        assert viewer["depends_on"][supervisor]["condition"] == "service_healthy"
        assert f":{port}/" in " ".join(viewer["healthcheck"]["test"])
        assert mounts(viewer)["/var/squall"] == (mounts(services[supervisor])["/var/squall"][0], False)
        published = {(str(p["published"]), int(p["target"])) for p in services[supervisor]["ports"]}
        assert published == {(str(7999 + n), port)}, "a person on the docker host reaches each logviewer"


def test_start_order_waits_for_health(services: dict[str, Any]) -> None:
    # depends_on with conditions: the long form survives `config` as a mapping
    assert services["nimbus"]["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    for name in (*SUPERVISORS, "ui"):
        assert services[name]["depends_on"]["nimbus"]["condition"] == "service_healthy"


def test_supervisors_advertise_their_service_name(services: dict[str, Any]) -> None:
    # Workers reach each other at storm.local.hostname, so it must be a name the other containers resolve.
    for name in SUPERVISORS:
        service = services[name]
        command = service["command"]
        assert service["hostname"] == name
        assert command[-1] == "supervisor" and command[0] == "-c", "options go before the verb: storm -c k=v COMMAND"
        assert parse_override(command[1]) == ("storm.local.hostname", name)


def test_daemons_mount_the_docker_conf_and_own_volumes(services: dict[str, Any]) -> None:
    local_volumes = set()
    for name in ("nimbus", *SUPERVISORS):
        by_target = mounts(services[name])
        assert by_target["/etc/squall/storm.yaml"] == (str(DOCKER_CONF), True)
        local_volumes.add(by_target["/var/squall"][0])
    assert len(local_volumes) == 3, "each daemon needs its own storm.local.dir volume"


# --- storm.yaml files ---------------------------------------------------------------------------------


def test_docker_conf_matches_the_compose_services(services: dict[str, Any]) -> None:
    conf = load_config(DOCKER_CONF, env={})
    assert unknown_keys(conf) == []
    assert conf["storm.zookeeper.servers"] == ["zookeeper"] and "zookeeper" in services
    assert conf["nimbus.seeds"] == ["nimbus"] and services["nimbus"]["hostname"] == "nimbus"
    assert conf["storm.local.dir"] == "/var/squall"
    assert conf["squall.log.format"] == "json"


def test_cluster_conf_loads_and_names_the_ensemble() -> None:
    conf = load_config(CLUSTER_CONF, env={})
    assert unknown_keys(conf) == [], "only keys from squall/core/config/keys.py KEYS"
    assert conf["storm.zookeeper.servers"] == ["zk1", "zk2", "zk3"]
    assert len(conf["nimbus.seeds"]) == 2
    assert conf["storm.local.dir"] == "/var/squall"
    assert conf["spark.master"] == "spark://spark-master:7077"


def test_zoo_cfg_is_the_ensemble_the_cluster_conf_names() -> None:
    settings = dict(
        line.split("=", 1) for line in ZOO_CFG.read_text().splitlines() if line.strip() and not line.startswith("#")
    )
    hosts = [settings[f"server.{n}"].split(":")[0] for n in (1, 2, 3)]
    conf = load_config(CLUSTER_CONF, env={})
    assert hosts == conf["storm.zookeeper.servers"]
    assert int(settings["clientPort"]) == conf["storm.zookeeper.port"]
    assert set(settings["4lw.commands.whitelist"].split(",")) == {"ruok", "srvr", "stat", "mntr"}


# --- Dockerfile ---------------------------------------------------------------------------------------


def test_dockerfile_copies_every_installed_package() -> None:
    # A package added to pyproject.toml but not copied would make `pip install .` in the image fail.
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    copied = set(re.findall(r"^COPY (\w+)/ ", (REPO / "deploy" / "Dockerfile").read_text(), re.MULTILINE))
    assert {p.split(".")[0] for p in packages} <= copied


# --- the secure profile (docker-compose.secure.yml) -----------------------------------------------------

SECURE_COMPOSE_FILE = REPO / "docker-compose.secure.yml"
SECURE_CONF = REPO / "deploy" / "docker" / "storm-secure.yaml"


def secure_compose(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed: run deploy/install-system-deps.sh --for-tests (make test does)")
    return subprocess.run([exe, "-f", str(COMPOSE_FILE), "-f", str(SECURE_COMPOSE_FILE), "config"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ["PATH"], **env})


def test_the_secure_profile_mounts_its_conf_and_certificates_and_gives_each_daemon_the_zookeeper_credential() -> None:
    result = secure_compose({"SQUALL_ZK_PASSWORD": "s3cret"})
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    for name in ("nimbus", *SUPERVISORS, "ui", "logviewer-1", "logviewer-2"):
        by_target = mounts(services[name])
        assert by_target["/etc/squall/storm.yaml"] == (str(SECURE_CONF), True)
        assert by_target["/etc/squall/certs"] == (str(REPO / "deploy" / "docker" / "certs"), True)
    for name in ("nimbus", *SUPERVISORS):
        overrides = dict(parse_override(arg) for arg in services[name]["command"][1:-1:2])
        assert overrides["storm.zookeeper.auth.payload"] == "squall:s3cret"
    assert "6067" in " ".join(services["nimbus"]["healthcheck"]["test"]), "healthy once the TLS port answers"
    assert parse_override(services["ui"]["command"][1]) == (
        "nimbus.thrift.tls.client.keystore.path", "/etc/squall/certs/squall-ui.pem")
    conf = load_config(SECURE_CONF, env={})
    for name, daemon in (("ui", "ui"), ("supervisor-1", "logviewer"), ("supervisor-2", "logviewer")):
        https = conf[f"{daemon}.https.port"]  # the logviewers share their supervisor's network, and its ports
        assert any(str(p["target"]) == str(https) for p in services[name]["ports"]), name
    for name in ("ui", "logviewer-1", "logviewer-2"):
        assert "8443" in " ".join(services[name]["healthcheck"]["test"]), f"{name}: healthy once HTTPS answers"


def test_the_secure_profile_wants_the_zookeeper_password_set() -> None:
    result = secure_compose({})
    assert result.returncode != 0 and "SQUALL_ZK_PASSWORD" in result.stderr


def test_the_secure_conf_turns_every_part_on_with_the_certificates_make_certs_makes() -> None:
    conf = load_config(SECURE_CONF, env={})
    assert unknown_keys(conf) == []
    assert conf["nimbus.thrift.tls.server.only"] and conf["nimbus.thrift.client.use.tls"]
    assert conf["nimbus.authorizer"] == "simple" and conf["storm.zookeeper.auth.scheme"] == "digest"
    assert conf["nimbus.seeds"] == [f"nimbus:{conf['nimbus.thrift.tls.port']}"]
    certs = {Path(conf[k]).name for k in conf if k.startswith("nimbus.thrift.tls.") and k.endswith(".path")}
    assert certs == {"ca.pem", "nimbus.pem", "squall-daemons.pem"}
    assert conf["nimbus.supervisor.users"] == ["squall-daemons"]
    assert conf["nimbus.impersonation.users"] == ["squall-ui"]
    header = SECURE_COMPOSE_FILE.read_text()
    for daemon in ("ui", "logviewer"):  # HTTPS with client certificates only, from certificates the header makes
        assert conf[f"{daemon}.https.need.client.auth"] is True
        assert Path(conf[f"{daemon}.https.truststore.path"]).name == "ca.pem"
        assert Path(conf[f"{daemon}.https.keystore.path"]).name == f"{daemon}.pem"
        assert f"deploy/make-certs.sh $d server {daemon} " in header
