"""The deployment files in deploy/ parse, agree with each other, and every command exists.

No container engine or systemd is needed: YAML goes through pyyaml, unit
files through a small parser of systemd's syntax, Redis configurations and
ACL files through their own (simple) rules, and every command line the files
run (``python -m workers``, ``fluxes``, ``redis-cli``, ``redis-server`` and
the shell around them) through the real argument parsers or a check of what
it writes. Two system tests then start redis-server with the shipped
configurations and run the compose recipe (init + every worker) for real.
"""

from __future__ import annotations

import configparser
import contextlib
import inspect
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from redis.backoff import NoBackoff
from redis.retry import Retry

from fluxes.cli.main import build_parser as fluxes_parser
from fluxes.cli.util import UsageError
from fluxes.cli.worker_args import KINDS
from fluxes.cli.worker_args import build_parser as workers_parser
from fluxes.config import InstanceConfig
from fluxes.domain.sched.inventory import Inventory
from fluxes.errors import FluxesError
from fluxes.formats.idset import IDSet
from fluxes.proc import redis_server as private_server
from fluxes.store.connection import parse_redis_url
from fluxes.store.instance import InstanceURI
from fluxes.store.keys import Keys
from tests.system.test_connections import every_key

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NS = "fx"
#: The uid the image runs as, the instance owner the init records, the k8s runAsUser.
IMAGE_UID = 10001
#: Shell utilities the scripts may use besides the programs checked below.
SHELL_UTILITIES = {"[", "test", "echo", "exit", "cp", "grep", "true", "set"}
#: Shell expressions in the files, and a value each takes at run time.
SHELL_SAMPLES = {
    "$url": "redis://fluxes:pw@redis:6379",
    "${FLUXES_URI%%\\?*}": "redis://fluxes:pw@redis:6379",
    "$NODE_NAME": "hpc-node-3",
    "${NODE_NAME##*[!0-9]}": "3",
    "$rank": "3",
    "$(POD_NAME)": "fluxes-ingest-5d8c9f-x2x7q",
}

def deploy_files(*patterns: str) -> list[Path]:
    """Files under deploy/ matching any of ``patterns`` (globs, recursive)."""
    found = sorted({p for pattern in patterns for p in DEPLOY.rglob(pattern) if p.is_file()})
    assert found, f"no deploy files match {patterns}"
    return found


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    """The non-empty documents of a YAML file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# ----------------------------------------------------------------------------- commands


@dataclass
class Script:
    """The simple commands of a small sh script, and the files it reads with ``<``."""

    commands: list[list[str]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)


_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "{", "}"}


def substitute(word: str, samples: dict[str, str]) -> str:
    """``word`` with every $-expression replaced by its sample (unknown: a failure)."""
    def one(match: re.Match[str]) -> str:
        expr = match.group(0)
        if expr not in samples:
            pytest.fail(f"no sample value for {expr!r}: add one to SHELL_SAMPLES")
        return samples[expr]

    return re.sub(r"\$\{[^}]*\}|\$\([A-Za-z_][A-Za-z0-9_]*\)|\$[A-Za-z_][A-Za-z0-9_]*", one,
                  word)


def _add(script: Script, words: list[str]) -> None:
    """Add a simple command, without its leading variable assignments (alone: none)."""
    while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    if words:
        script.commands.append(words)


def parse_script(text: str, samples: dict[str, str]) -> Script:
    """Split a (simple, one command per line or joined by && || ;) sh script."""
    script = Script()
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        current: list[str] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word in _SEPARATORS:
                _add(script, current)
                current = []
            elif set(word) <= set("<>&") or (word.isdigit() and i + 1 < len(words)
                                             and set(words[i + 1]) <= set("<>&")):
                if word.isdigit():  # the fd of "2>&1"
                    i += 1
                    word = words[i]
                target = words[i + 1] if i + 1 < len(words) else ""
                if word == "<":
                    script.inputs.append(substitute(target, samples))
                i += 1  # skip the target too
            else:
                current.append(substitute(word, samples))
            i += 1
        _add(script, current)
    return script


def check_worker(argv: list[str], where: str) -> None:
    """``python -m workers ARGS``: ARGS parse, and mean something for their kind."""
    try:
        args = workers_parser().parse_args(argv)
    except UsageError as exc:
        pytest.fail(f"{where}: python -m workers {shlex.join(argv)}: {exc}")
    if args.uri is not None:
        parse_redis_url(InstanceURI.parse(args.uri).redis_url)
    if args.kind == "exec":
        assert args.ranks, f"{where}: an exec worker needs --ranks"
        assert len(IDSet(args.ranks)) >= 1
        assert args.state_dir, f"{where}: give the exec worker a --state-dir it owns"
    else:
        assert args.ranks is None and args.state_dir is None, f"{where}: exec-only options"
    if args.kind != "job-manager":
        assert "--partition" not in argv, f"{where}: --partition is for job managers"
    assert args.partition >= 0


def check_redis_cli(argv: list[str], where: str) -> None:
    """redis-cli: connection options, then PING (a health check)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        option = argv[i]
        if option in ("-u", "-h", "-p", "--user", "--pass", "-a", "-n"):
            if option == "-u":
                assert parse_redis_url(argv[i + 1]).kind == "single", where
            i += 2
        elif option in ("-x", "--no-auth-warning", "--tls"):
            i += 1
        else:
            pytest.fail(f"{where}: redis-cli option {option} is not one the deploy files use")
    command, args = argv[i].upper(), argv[i + 1:]
    # Only health checks: the instance is recorded by `fluxes admin init`, which checks it.
    assert command == "PING" and not args, f"{where}: redis-cli {command}"


def check_command(argv: list[str], where: str, mounts: dict[str, Path | None]) -> str:
    """Check one command line; return what it runs ("worker:KIND", "fluxes", "redis-cli"...)."""
    if argv[0] == "exec":
        argv = argv[1:]
    program = os.path.basename(argv[0])
    if program == "docker-entrypoint.sh":  # the redis image's: drops root, runs the rest
        return check_command(argv[1:], where, mounts)
    if re.fullmatch(r"python3?(\.\d+)?", program):
        assert argv[1:3] == ["-m", "workers"], f"{where}: {shlex.join(argv)}"
        check_worker(argv[3:], where)
        return f"worker:{argv[3]}"
    if program == "fluxes":
        try:
            fluxes_parser().parse_args(argv[1:])
        except FluxesError as exc:
            pytest.fail(f"{where}: {shlex.join(argv)}: {exc}")
        return "fluxes"
    if program == "redis-cli":
        check_redis_cli(argv[1:], where)
        return "redis-cli"
    if program == "redis-server":
        conf, options = argv[1], argv[2:]
        assert conf in mounts, f"{where}: redis-server reads {conf}, which is not provided"
        assert mounts[conf] is None or mounts[conf] == DEPLOY / "redis" / "redis.conf", where
        names = options[::2]
        assert all(n.startswith("--") for n in names) and len(options) % 2 == 0, where
        return "redis-server"
    assert program in SHELL_UTILITIES, f"{where}: unknown command {argv[0]!r}"
    return program


def check_inputs(script: Script, mounts: dict[str, Path | None], where: str) -> None:
    """Files a script reads are provided (mounted from a deploy file or a config key)."""
    for path in script.inputs:
        assert path in mounts, f"{where}: reads {path}, which is not mounted"


# ----------------------------------------------------------------------------- instance config


def inventory(toml_text: str) -> Inventory:
    """The inventory of an instance configuration (checking the whole configuration)."""
    config = InstanceConfig.from_toml(toml_text)
    return Inventory.from_config({"resource": dict(config.resource)})


# ----------------------------------------------------------------------------- YAML


def test_every_yaml_file_parses() -> None:
    for path in deploy_files("*.yml", "*.yaml"):
        assert yaml_docs(path), path


# ----------------------------------------------------------------------------- compose


COMPOSE = DEPLOY / "compose" / "docker-compose.yml"


def compose_env() -> dict[str, str]:
    """The variables of compose/env.example."""
    return dict(line.split("=", 1) for line in (DEPLOY / "compose" / "env.example")
                .read_text().splitlines() if line and not line.startswith("#"))


def compose_interpolate(text: str) -> str:
    """Docker Compose's own ${VAR}/${VAR:?msg} interpolation, then $$ -> $."""
    env = compose_env()

    def one(match: re.Match[str]) -> str:
        name = re.split(r"[:?-]", match.group(1), maxsplit=1)[0]
        assert name in env, f"compose uses ${{{name}}}, which env.example lacks"
        return env[name]

    text = re.sub(r"(?<!\$)\$\{([^}]*)\}", one, text)
    return text.replace("$$", "$")


def compose_services() -> dict[str, dict[str, Any]]:
    """The compose file's services (anchors merged, variables interpolated)."""
    doc = yaml.safe_load(compose_interpolate(COMPOSE.read_text()))
    services: dict[str, dict[str, Any]] = doc["services"]
    return services


def compose_mounts(service: dict[str, Any]) -> dict[str, Path | None]:
    """Container path -> the deploy file mounted there (None: a volume or tmpfs)."""
    mounts: dict[str, Path | None] = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        mounts[target] = (COMPOSE.parent / source).resolve() \
            if source.startswith(".") else None
    for target in service.get("tmpfs", []):
        mounts[target] = None
    return mounts


def service_argv(service: dict[str, Any]) -> list[str]:
    """entrypoint + command of a compose service, as one argv."""
    def words(value: Any) -> list[str]:
        if value is None:
            return []
        return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]

    return words(service.get("entrypoint")) + words(service.get("command"))


def run_argv(argv: list[str], where: str, mounts: dict[str, Path | None]) -> list[str]:
    """Check ``argv`` (a program, or ``sh -c SCRIPT``); what it runs."""
    if argv[0] in ("/bin/sh", "sh") and argv[1] in ("-c", "-ec"):
        script = parse_script(argv[2], SHELL_SAMPLES)
        check_inputs(script, mounts, where)
        return [check_command(c, where, mounts) for c in script.commands]
    substituted = [substitute(a, SHELL_SAMPLES) for a in argv]
    return [check_command(substituted, where, mounts)]


def test_compose_runs_every_worker_kind_with_valid_commands() -> None:
    services = compose_services()
    ran: dict[str, list[str]] = {}
    for name, service in services.items():
        mounts = compose_mounts(service)
        for target, source in mounts.items():
            if source is not None:
                assert source.exists() or Path(f"{source}.example").exists(), \
                    f"{name}: mounts {source} at {target}, and there is no such file"
        ran[name] = run_argv(service_argv(service), f"compose {name}", mounts)
        health = service.get("healthcheck", {}).get("test")
        if health:
            assert health[0] in ("CMD", "CMD-SHELL"), name
            argv = ["/bin/sh", "-c", health[1]] if health[0] == "CMD-SHELL" else health[1:]
            run_argv(argv, f"compose {name} healthcheck", mounts)
        for dep in service.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        uri = service.get("environment", {}).get("FLUXES_URI")
        if uri is not None:
            assert parse_redis_url(InstanceURI.parse(uri).redis_url).kind == "single"
    workers = {r.split(":")[1] for runs in ran.values() for r in runs if r.startswith("worker:")}
    assert workers == set(KINDS)
    assert "redis-server" in ran["redis"] and ran["init"] == ["fluxes"]
    assert service_argv(services["init"])[1:3] == ["admin", "init"]


def test_compose_exec_workers_match_the_inventory() -> None:
    services = compose_services()
    inv = inventory((DEPLOY / "compose" / "instance.toml").read_text())
    ranks: dict[int, str] = {}
    for name, service in services.items():
        argv = service_argv(service)
        if argv[3:4] != ["exec"]:
            continue
        rank = int(argv[argv.index("--ranks") + 1])
        assert rank not in ranks, f"rank {rank} served twice"
        ranks[rank] = name
        assert inv[rank].hostname == service["hostname"], name
    assert sorted(ranks) == list(range(len(inv)))


# ----------------------------------------------------------------------------- Kubernetes


K8S = DEPLOY / "k8s"
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


def k8s_objects() -> list[tuple[Path, dict[str, Any]]]:
    """Every object of every manifest (the kustomization and the secret example too)."""
    return [(path, doc) for path in sorted(K8S.glob("*.yaml")) for doc in yaml_docs(path)]


def pod_mounts(pod: dict[str, Any], container: dict[str, Any],
               configmaps: dict[str, dict[str, str]], secrets: dict[str, dict[str, str]]
               ) -> dict[str, Path | None]:
    """Container path -> None for every mount, checking volumes and keys exist."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    templates = {t["metadata"]["name"] for t in pod.get("_claims", [])}
    mounts: dict[str, Path | None] = {}
    for mount in container.get("volumeMounts", []):
        name = mount["name"]
        assert name in volumes or name in templates, f"volume {name} is not defined"
        volume = volumes.get(name, {})
        if "configMap" in volume:
            data = configmaps[volume["configMap"]["name"]]
        elif "secret" in volume:
            data = secrets[volume["secret"]["secretName"]]
        else:
            data = None
        if data is not None and "subPath" in mount:
            assert mount["subPath"] in data, f"no key {mount['subPath']} for {name}"
        if data is not None and "subPath" not in mount:
            for key in data:
                mounts[f"{mount['mountPath']}/{key}"] = None
        mounts[mount["mountPath"]] = None
    return mounts


def test_k8s_manifests_are_consistent_and_run_valid_commands() -> None:
    objects = k8s_objects()
    configmaps = {d["metadata"]["name"]: d["data"] for _p, d in objects if d["kind"] == "ConfigMap"}
    secrets = {d["metadata"]["name"]: d["stringData"] for _p, d in objects
               if d["kind"] == "Secret"}
    ran: dict[str, list[str]] = {}
    replicas: dict[str, int] = {}
    for path, doc in objects:
        kind = doc["kind"]
        if kind == "Kustomization":
            continue
        if kind != "Namespace":
            assert doc["metadata"]["namespace"] == "fluxes", path
        if kind not in WORKLOADS:
            continue
        name = doc["metadata"]["name"]
        spec = doc["spec"]
        template = spec["template"]
        if kind != "Job":
            selector = spec["selector"]["matchLabels"]
            labels = template["metadata"]["labels"]
            assert selector.items() <= labels.items(), f"{name}: selector misses its pods"
        replicas[name] = spec.get("replicas", 1)
        pod = dict(template["spec"], _claims=spec.get("volumeClaimTemplates", []))
        for container in pod.get("initContainers", []) + pod["containers"]:
            where = f"{path.name} {name}/{container['name']}"
            for env in container.get("env", []):
                ref = env.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    assert ref["secretKeyRef"]["key"] in secrets[ref["secretKeyRef"]["name"]]
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["key"] in \
                        configmaps[ref["configMapKeyRef"]["name"]]
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in configmaps, where
            argv = list(container.get("command", [])) + list(container.get("args", []))
            if not container.get("command"):
                # only the redis image is used for its own entrypoint
                assert container["image"].startswith("redis:"), where
                argv = ["docker-entrypoint.sh", *argv]
            if container["image"].startswith("fluxes"):
                assert pod["securityContext"]["runAsUser"] == IMAGE_UID, where
            mounts = pod_mounts(pod, container, configmaps, secrets)
            ran.setdefault(name, []).extend(run_argv(argv, where, mounts))
    workers = {r.split(":")[1] for runs in ran.values() for r in runs if r.startswith("worker:")}
    assert workers == set(KINDS)
    # leaders and standbys: the lease makes one of two the leader
    assert replicas["fluxes-job-manager"] == 2 and replicas["fluxes-scheduler"] == 2
    assert replicas["fluxes-job-list"] == 2  # one folds, one stands by (job-list lease)


def test_k8s_kustomization_lists_every_manifest_but_the_secrets() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml",
                                                      "secret.example.yaml"}
    assert listed == present


def test_k8s_config_holds_deploy_redis_conf_and_a_valid_instance_config() -> None:
    config = next(d for _p, d in k8s_objects() if d.get("metadata", {}).get("name") == "fluxes-config")
    assert config["data"]["redis.conf"] == (DEPLOY / "redis" / "redis.conf").read_text(), \
        "deploy/k8s/config.yaml's redis.conf differs from deploy/redis/redis.conf"
    inv = inventory(config["data"]["instance.toml"])
    # the exec DaemonSet's rule: a node's name ends in its rank
    for rank in range(len(inv)):
        host = inv[rank].hostname
        assert host is not None and re.search(r"(\d+)$", host), host
        assert int(re.search(r"(\d+)$", host).group(1)) == rank, host  # type: ignore[union-attr]


def test_k8s_secret_example_acl_is_the_acl_example() -> None:
    secret = next(d for _p, d in k8s_objects() if d.get("metadata", {}).get("name") == "redis-users")
    example = acl_users((DEPLOY / "redis" / "users.acl.example").read_text())
    for name, rules in acl_users(secret["stringData"]["users.acl"]).items():
        assert rules == example[name], name


# ----------------------------------------------------------------------------- systemd


SYSTEMD = DEPLOY / "systemd"
SPECIFIERS = {"%i": "3", "%I": "3", "%H": "node3.example.org", "%t": "/run", "%%": "%"}


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as section -> key -> values (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"{path.name}:{number}: keep lines unbroken"
        if line.startswith("["):
            assert line.endswith("]"), f"{path.name}:{number}: bad section header"
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}:{number}: a setting outside a section"
        key, eq, value = line.partition("=")
        assert eq, f"{path.name}:{number}: not KEY=VALUE"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def env_file(path: Path) -> dict[str, str]:
    """An EnvironmentFile (KEY=VALUE lines) as a dict; commented-out assignments left out."""
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _eq, value = line.partition("=")
            assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), line
            out[key] = value
    return out


def exec_start_argv(value: str, env: dict[str, str]) -> list[str]:
    """systemd's ExecStart= expansion: specifiers, ${VAR} as one word, $VAR split."""
    value = value.lstrip("-@:+!")
    for spec, sample in SPECIFIERS.items():
        value = value.replace(spec, sample)
    argv: list[str] = []
    for word in shlex.split(value):
        if re.fullmatch(r"\$[A-Z_][A-Z0-9_]*", word):
            argv += env[word[1:]].split()
        else:
            argv.append(re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}", lambda m: env[m.group(1)], word))
    return argv


def unit_environment(unit: dict[str, dict[str, list[str]]], env: dict[str, str]
                     ) -> dict[str, str]:
    """A unit's environment: its Environment= defaults (specifiers expanded), overridden by
    the EnvironmentFile's ``env`` (systemd's rule, whatever the order of the two)."""
    out: dict[str, str] = {}
    for assignment in unit["Service"].get("Environment", []):
        for word in shlex.split(assignment):
            expanded = word
            for spec, sample in SPECIFIERS.items():
                expanded = expanded.replace(spec, sample)
            key, _eq, value = expanded.partition("=")
            out[key] = value
    return {**out, **env}


def test_systemd_units_restart_read_the_env_file_and_run_valid_workers() -> None:
    ran: dict[str, str] = {}
    for path in deploy_files("*.service"):
        unit = read_unit(path)
        env = unit_environment(unit, env_file(SYSTEMD / "fluxes.env.example"))
        assert set(unit) == {"Unit", "Service", "Install"}, path.name
        service = unit["Service"]
        assert service["Restart"] == ["always"] and service["RestartSec"], path.name
        assert service["EnvironmentFile"] == ["/etc/fluxes/fluxes.env"], path.name
        assert service["User"] == ["fluxes"], path.name
        assert unit["Install"]["WantedBy"] == ["fluxes.target"], path.name
        assert unit["Unit"]["PartOf"] == ["fluxes.target"], path.name
        [start] = service["ExecStart"]
        assert start.startswith("/"), f"{path.name}: ExecStart needs an absolute path"
        if path.name.endswith("@.service"):
            assert "%i" in start, f"{path.name}: a template must use its instance name"
        argv = exec_start_argv(start, env)
        ran[path.name] = check_command(argv, path.name, {})
    assert {r.split(":")[1] for r in ran.values()} == set(KINDS)
    target = read_unit(SYSTEMD / "fluxes.target")
    assert target["Install"]["WantedBy"] == ["multi-user.target"]


def metrics_ports(env: dict[str, str]) -> dict[str, int | None]:
    """Unit file name -> the metrics port its worker serves on with ``env`` as the file."""
    from fluxes.cli.worker_args import build_parser as parser

    ports = {}
    for path in deploy_files("*.service"):
        unit = read_unit(path)
        [start] = unit["Service"]["ExecStart"]
        argv = exec_start_argv(start, unit_environment(unit, env))
        ports[path.name] = parser().parse_args(argv[argv.index("workers") + 1:]).metrics_port
    return ports


def test_systemd_units_of_one_machine_never_share_a_metrics_port() -> None:
    """Every unit reads the same environment file, so a port set there for all would make
    every unit but the first on a machine die with 'Address already in use'."""
    text = (SYSTEMD / "fluxes.env.example").read_text()
    assert "--metrics-port" not in env_file(SYSTEMD / "fluxes.env.example")["FLUXES_WORKER_OPTS"]
    assert not re.search(r"FLUXES_WORKER_OPTS.*--metrics-port", text)
    # the example as shipped, and with every commented-out port setting switched on
    shipped = env_file(SYSTEMD / "fluxes.env.example")
    enabled = dict(shipped, **dict(re.findall(r"^#(FLUXES_\w+_METRICS_PORT)=(\S+)$", text,
                                              flags=re.M)))
    assert len(enabled) > len(shipped) + 3
    for env in (shipped, enabled):
        ports = metrics_ports(env)
        assert all(port is not None for port in ports.values()), ports
        # templates may run several instances on one machine: any free port there,
        # fixed ports for the others, all different
        assert ports["fluxes-job-manager@.service"] == 0
        fixed = [port for port in ports.values() if port]
        assert len(fixed) == len(set(fixed)) == len(ports) - 1, ports
    # and each can be turned off from the file
    off = {key: "off" for path in deploy_files("*.service")
           for key in unit_environment(read_unit(path), {}) if key.endswith("_METRICS_PORT")}
    assert set(metrics_ports(dict(shipped, **off)).values()) == {None}


def test_systemd_exec_units_keep_tasks_and_their_state_across_restarts() -> None:
    unit = read_unit(SYSTEMD / "fluxes-exec@.service")
    service = unit["Service"]
    assert service["KillMode"] == ["process"]
    assert service["RuntimeDirectoryPreserve"] == ["yes"]
    [start] = service["ExecStart"]
    state = exec_start_argv(start, unit_environment(unit, env_file(
        SYSTEMD / "fluxes.env.example")))
    directory = state[state.index("--state-dir") + 1]
    assert directory == "/run/" + service["RuntimeDirectory"][0].replace("%i", "3")


def test_env_example_uris_all_parse() -> None:
    text = (SYSTEMD / "fluxes.env.example").read_text()
    uris = re.findall(r"^#?FLUXES_URI=(.+)$", text, flags=re.M)
    kinds = set()
    for uri in uris:
        parsed = InstanceURI.parse(uri)
        assert parsed.ns == NS
        kinds.add((parse_redis_url(parsed.redis_url).kind,
                   parse_redis_url(parsed.redis_url).tls))
    assert kinds == {("single", False), ("single", True), ("sentinel", False),
                     ("cluster", False)}
    # configparser reads the file too: no section, but every line KEY=VALUE
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string("[env]\n" + text)
    assert parser["env"]["FLUXES_URI"].startswith("redis://")


# ----------------------------------------------------------------------------- Redis configs


def redis_conf(path: Path) -> dict[str, list[list[str]]]:
    """Directive -> the argument lists of its lines (Redis's own quoting rules)."""
    out: dict[str, list[list[str]]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            words = shlex.split(line)
            out.setdefault(words[0].lower(), []).append(words[1:])
    return out


def one(conf: dict[str, list[list[str]]], name: str) -> str:
    """The single value of a single-argument directive."""
    [[value]] = conf[name]
    return value


def acl_users(text: str) -> dict[str, list[str]]:
    """User name -> rules, for every ``user NAME rules...`` line of ``text``."""
    users = {}
    for line in text.splitlines():
        if line.startswith("user "):
            name, _sp, rest = line[len("user "):].partition(" ")
            users[name] = re.findall(r"\([^)]*\)|\S+", rest)
    return users


def alice_line() -> str:
    """The example submitter's ACL line shown in deploy/redis/README.md."""
    [line] = [line for line in (DEPLOY / "redis" / "README.md").read_text().splitlines()
              if line.startswith("user alice ")]
    return line


def test_redis_conf_has_the_settings_fluxes_relies_on() -> None:
    conf = redis_conf(DEPLOY / "redis" / "redis.conf")
    assert one(conf, "appendonly") == "yes"
    assert one(conf, "appendfsync") in ("always", "everysec")
    assert one(conf, "protected-mode") == "yes"
    assert one(conf, "aclfile") == "/etc/redis/users.acl"
    assert one(conf, "maxmemory-policy") == "noeviction"
    assert one(conf, "timeout") == "0"
    # the private Redis of `fluxes start` uses the same values, for the same reasons
    source = inspect.getsource(private_server.RedisServer.start)
    for name in ("stream-node-max-bytes", "hz", "busy-reply-threshold"):
        assert f'"--{name}", "{one(conf, name)}"' in source, name
    text = (DEPLOY / "redis" / "redis.conf").read_text()
    assert "always" in text and "everysec" in text  # the trade-off is written down


def test_sentinel_and_cluster_configs_fit_the_acl_and_each_other() -> None:
    users = acl_users((DEPLOY / "redis" / "users.acl.example").read_text())
    busy = int(one(redis_conf(DEPLOY / "redis" / "redis.conf"), "busy-reply-threshold"))
    for path in deploy_files("primary.conf", "replica.conf", "node.conf"):
        conf = redis_conf(path)
        assert conf["include"] == [["/etc/redis/redis.conf"]], path.name
        assert one(conf, "masteruser") in users, path.name
    primary = redis_conf(DEPLOY / "redis" / "sentinel" / "primary.conf")
    replica = redis_conf(DEPLOY / "redis" / "sentinel" / "replica.conf")
    assert replica["replicaof"] == [[primary["bind"][0][-1], "6379"]]
    sentinel = redis_conf(DEPLOY / "redis" / "sentinel" / "sentinel.conf")
    monitors = {tuple(args[:2]): args[2:] for args in sentinel["sentinel"]}
    assert monitors[("monitor", "fluxes")] == [primary["bind"][0][-1], "6379", "2"]
    assert monitors[("auth-user", "fluxes")] == ["sentinel"] and "sentinel" in users
    assert int(monitors[("down-after-milliseconds", "fluxes")][0]) > busy
    cluster = redis_conf(DEPLOY / "redis" / "cluster" / "node.conf")
    assert one(cluster, "cluster-enabled") == "yes"
    assert int(one(cluster, "cluster-node-timeout")) > busy


def test_acl_example_gives_the_workers_every_key_and_nothing_else() -> None:
    users = acl_users((DEPLOY / "redis" / "users.acl.example").read_text())
    assert users["default"] == ["off"]
    rules = users["fluxes"]
    patterns = [r[1:] for r in rules if r.startswith("~")]
    for partitions in (1, 4):
        for key in every_key(Keys(NS, partitions)):
            assert any(fnmatchcase(key, p) for p in patterns), key
    assert not any(fnmatchcase(key, p) for p in patterns for key in every_key(Keys("other", 4)))
    assert "-@dangerous" in rules and "~*" not in rules and "resetchannels" in rules
    # every password is a placeholder Redis refuses, so the example cannot run as is
    for name, user_rules in users.items():
        secrets = [r for r in user_rules if r.startswith(("#", ">"))]
        assert all(s.startswith("#REPLACE_WITH_SHA256_OF_") for s in secrets), name


def test_acl_example_shows_the_rules_fluxes_admin_adduser_gives() -> None:
    from fluxes.store.security import user_acl_rules

    shown = acl_users(alice_line())["alice"]
    made = user_acl_rules(Keys(NS), "alice", 5001, "pw")
    assert made[0] == "reset"  # redefines a user; a file's line defines a fresh one anyway

    def hashes_hidden(rules: list[str]) -> list[str]:
        return ["#HASH" if r.startswith("#") else r for r in rules]

    assert hashes_hidden(shown) == hashes_hidden(made[1:])


# ----------------------------------------------------------------------------- docs, image


#: A fluxes command in a docs line: at its start, or run in a container.
_DOC_COMMAND = re.compile(r"(?:^|\bexec (?:-\S+ )*\S+ |-- )((?:fluxes|python -m workers) .*)$")


def test_commands_in_the_docs_parse() -> None:
    docs = [*deploy_files("*.md"), ROOT / "docs" / "deploy.md"]
    checked = 0
    for path in docs:
        for block in re.findall(r"```[a-z]*\n(.*?)```|\n\n((?: {4}.*\n)+)", path.read_text(),
                                flags=re.S):
            for line in "".join(block).splitlines():
                found = _DOC_COMMAND.search(line.strip())
                if found:
                    argv = shlex.split(found.group(1).split(" # ")[0])
                    # a shell variable stands for some value: any will do for parsing
                    check_command(["0" if "$" in a else a for a in argv], str(path), {})
                    checked += 1
    assert checked >= 5


def test_dockerfile_copies_what_exists_and_runs_as_the_image_uid() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    for sources in re.findall(r"^COPY (.+) \S+$", text, flags=re.M):
        for source in sources.split():
            assert (ROOT / source).exists(), source
    assert f"USER {IMAGE_UID}:{IMAGE_UID}" in text
    assert f"--uid {IMAGE_UID}" in text


# ----------------------------------------------------------------------------- system


def need_redis_server() -> None:
    from tests.system.conftest import need_redis

    need_redis()


def acl_with_passwords(directory: Path) -> tuple[Path, dict[str, str]]:
    """users.acl.example with real hashes (and alice's line uncommented); the passwords."""
    import hashlib

    text = (DEPLOY / "redis" / "users.acl.example").read_text()
    passwords: dict[str, str] = {}

    def fill(match: re.Match[str]) -> str:
        who = match.group(1).lower()
        passwords[who] = f"{who}-test-password"
        return "#" + hashlib.sha256(passwords[who].encode()).hexdigest()

    text = re.sub(r"#REPLACE_WITH_SHA256_OF_([A-Z]+)_PASSWORD", fill, text)
    passwords["alice"] = "alice-test-password"
    alice = hashlib.sha256(b"alice-test-password").hexdigest()
    text += alice_line().replace("#<sha256-of-alices-password>", f"#{alice}") + "\n"
    path = directory / "users.acl"
    path.write_text(text)
    return path, passwords


def _with_dir(text: str, directory: Path) -> str:
    return re.sub(r"^dir .*$", f"dir {directory}", text, flags=re.M)


@contextlib.contextmanager
def redis_server(directory: Path, conf: Path, *extra: str,
                 password: tuple[str, str] | None = None) -> Iterator[int]:
    """redis-server with ``conf`` (its include rewritten to deploy/redis/redis.conf) on a
    free port; yields the port."""
    from tests.system.test_connections import free_port

    directory.mkdir(parents=True, exist_ok=True)
    included = directory / "redis.conf"
    # "dir" is applied as it is read (a missing directory is fatal before any
    # command-line override), so the copies point at the test's directory
    included.write_text(_with_dir((DEPLOY / "redis" / "redis.conf").read_text(), directory))
    text = _with_dir(conf.read_text(), directory).replace("include /etc/redis/redis.conf",
                                                          f"include {included}")
    local = directory / f"test-{conf.name}"
    local.write_text(text)
    port = free_port(with_bus=True)
    proc = subprocess.Popen([str(shutil.which("redis-server")), str(local), *extra,
                             "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
                             "--logfile", str(directory / "log")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                log = (directory / "log").read_text() if (directory / "log").exists() else ""
                pytest.fail(f"redis-server {conf.name} exited: {log[-800:]}")
            try:
                user, secret = password if password else (None, None)
                if redis.Redis(port=port, username=user, password=secret).ping():
                    break
            except redis.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"redis-server {conf.name} did not answer"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.system
def test_redis_accepts_every_shipped_config_and_the_acl_file() -> None:
    need_redis_server()
    with tempfile.TemporaryDirectory(prefix="fluxes-deploy-") as tmp:
        root = Path(tmp)
        acl, passwords = acl_with_passwords(root)
        admin = ("admin", passwords["admin"])
        with redis_server(root / "main", DEPLOY / "redis" / "redis.conf", "--aclfile", str(acl),
                          password=admin) as port:
            client = redis.Redis(port=port, username="admin", password=passwords["admin"])
            assert client.config_get("appendonly")["appendonly"] == "yes"
            assert client.config_get("hz")["hz"] == "100"
            with pytest.raises(redis.AuthenticationError):  # the default user is off
                # (no retries: redis-py retries an AuthenticationError, a ConnectionError)
                redis.Redis(port=port, retry=Retry(NoBackoff(), 0)).get("x")
            alice = redis.Redis(port=port, username="alice", password=passwords["alice"])
            alice.xadd(Keys(NS).submit("alice"), {"d": "{}"})
            with pytest.raises(redis.exceptions.NoPermissionError):
                alice.xadd(Keys(NS).submit("bob"), {"d": "{}"})
            with pytest.raises(redis.exceptions.NoPermissionError):
                alice.hset(Keys(NS).job(1), "R", "{}")
            assert alice.hgetall(Keys(NS).job(1)) == {}
            worker = redis.Redis(port=port, username="fluxes", password=passwords["fluxes"])
            worker.hset(Keys(NS, 4).job(5), "R", "{}")
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.set("elsewhere", 1)
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.flushall()
        for conf in ("sentinel/primary.conf", "sentinel/replica.conf", "cluster/node.conf"):
            with redis_server(root / conf.replace("/", "-"), DEPLOY / "redis" / conf,
                              "--aclfile", str(acl), password=admin) as port:
                role = redis.Redis(port=port, username="admin", password=passwords["admin"])
                assert role.ping()
        sentinel_dir = root / "sentinel"
        with redis_server(sentinel_dir, DEPLOY / "redis" / "sentinel" / "sentinel.conf",
                          "--sentinel",
                          password=("default", "REPLACE_WITH_SENTINEL_CLIENT_PASSWORD")) as port:
            sentinel = redis.Redis(port=port, password="REPLACE_WITH_SENTINEL_CLIENT_PASSWORD")
            assert sentinel.sentinel_master("fluxes")["quorum"] == 2


@pytest.mark.system
def test_the_compose_recipe_runs_jobs() -> None:
    """redis.conf + the ACL file + compose's init script + every worker command, for real."""
    need_redis_server()
    from fluxes.store.client import Client
    from fluxes.store.instance import Instance
    from tests.system.test_connections import sim

    services = compose_services()
    with tempfile.TemporaryDirectory(prefix="fluxes-compose-") as tmp:
        root = Path(tmp)
        acl, passwords = acl_with_passwords(root)
        with redis_server(root / "redis", DEPLOY / "redis" / "redis.conf", "--aclfile", str(acl),
                          password=("fluxes", passwords["fluxes"])) as port:
            uri = f"redis://fluxes:{passwords['fluxes']}@127.0.0.1:{port}?ns={NS}"
            env = dict(os.environ, FLUXES_URI=uri, PATH=f"{Path(sys.executable).parent}:"
                       f"{os.environ.get('PATH', '')}")
            init = [str(DEPLOY / "compose" / "instance.toml")
                    if a == "/etc/fluxes/instance.toml" else a
                    for a in service_argv(services["init"])]
            subprocess.run(init, env=env, check=True, timeout=30, capture_output=True)
            procs = []
            try:
                for name, service in services.items():
                    argv = service_argv(service)
                    if argv[:1] != ["python"]:
                        continue
                    argv = [sys.executable, *argv[1:]]
                    if "--state-dir" in argv:
                        argv[argv.index("--state-dir") + 1] = str(root / name)
                    procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                                  stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL))
                assert len(procs) == 8  # 4 workers, 3 exec workers, accounting
                inst = Instance.connect(uri)
                assert inst.owner() == ("fluxes", IMAGE_UID)
                ids = [int(i) for i in Client(inst, user="fluxes").submit(
                    [{"jobspec": sim()}] * 6, timeout=30)]
                deadline = time.monotonic() + 30
                while not all(inst.redis.hget(inst.keys.job(j), "result") for j in ids):
                    assert time.monotonic() < deadline, "jobs did not finish"
                    assert all(p.poll() is None for p in procs), "a worker exited"
                    time.sleep(0.1)
            finally:
                for proc in procs:
                    proc.send_signal(signal.SIGTERM)
                for proc in procs:
                    try:
                        proc.wait(15)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
