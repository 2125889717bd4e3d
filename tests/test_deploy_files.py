"""Checks that the files under deploy/ describe a cluster jetraft can actually run.

Every node config is read by jetraft's own parser (cluster.config_file) and turned into server
options by the real CLI code (cluster.cli.server_options), and so is every command line written in
the Dockerfile, compose.yaml and the Kubernetes manifest: a misspelt flag, a bad route URL or a
cluster without a name fails here, not on a production machine. The sets of nodes must be
consistent (each node listed exactly once in everyone's routes), and the systemd unit, the
container image and the manifests must agree with the configs (ports, data paths, user).

No YAML parser is installed in .venv (pyyaml is not a dependency), so compose.yaml and the
Kubernetes manifest are checked structurally on their text. Their command lines are written as
flow sequences of double-quoted strings, which are JSON, and are parsed with json.

Route TLS is on in every deployment, with certificate files that exist only on the machines
(placeholders under ``/etc/jetraft/tls/``, made by ``deploy/tls/make-route-certs.sh``). The
parser checks that TLS files exist; for those placeholder paths only, the checks here treat them
as present (``_placeholder_tls_files_exist``). Config files that the command lines read with
``-c`` inside a container are mapped back to the repository's file (compose bind mounts) or to
the ConfigMap's text (Kubernetes).

Must never: start docker, kubectl, systemd or a server; these checks read files only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from cluster import cli
from cluster.config_file import parse_config
from cluster.server import ServerOptions

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
CONFIG_DIR = DEPLOY / "config"
NODE_SETS = {"3-node": (CONFIG_DIR, 3), "5-node": (CONFIG_DIR / "5-nodes", 5)}
UNIT = DEPLOY / "systemd" / "jetraft@.service"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
COMPOSE = DEPLOY / "docker" / "compose.yaml"
K8S = DEPLOY / "k8s" / "jetraft.yaml"
README = DEPLOY / "README.md"

CLIENT_PORT = 4222
CLUSTER_PORT = 6222
MONITOR_PORT = 8222
COMPOSE_NODES = ("n1", "n2", "n3")
COMPOSE_HOST_CLIENT_PORTS = (4222, 4223, 4224)
K8S_REPLICAS = 3
# a clean shutdown commits queued publishes and fsyncs every store: allow it at least this long
STOP_GRACE_MIN_S = 30
NOFILE_MIN = 10_000
UNIT_CONF_PATH = "/etc/jetraft/%i.conf"
NODE_FILE = re.compile(r"^node-(\d+)\.conf$")
# where the deployments expect route certificates: placeholders, present only on real machines
TLS_DIR = "/etc/jetraft/tls/"
TLS_FILES = {TLS_DIR + name for name in ("route.pem", "route-key.pem", "ca.pem")}
MAKE_CERTS = DEPLOY / "tls" / "make-route-certs.sh"


@pytest.fixture(autouse=True)
def _placeholder_tls_files_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser refuses TLS files that do not exist; the deployments' placeholder certificate
    paths count as present here, and only they."""
    real_is_file = Path.is_file

    def is_file(self: Path) -> bool:
        return str(self) in TLS_FILES or real_is_file(self)

    monkeypatch.setattr(Path, "is_file", is_file)


def _assert_route_security(opts: ServerOptions) -> None:
    assert opts.route_auth.enabled, "deployments ship with route authorization on"
    tls = opts.route_tls
    assert tls is not None, "deployments ship with route TLS on"
    assert tls.verify and not tls.insecure, "peers must present a certificate signed by the CA"
    assert {str(tls.cert_file), str(tls.key_file), str(tls.ca_file)} == TLS_FILES


def _mapped_config(argv: list[str], files: dict[str, Path]) -> list[str]:
    """``argv`` with a container's ``-c PATH`` replaced by the file that is mounted there."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg in {"-c", "--config"}:
            assert out[i + 1] in files, f"-c {out[i + 1]} is not mounted"
            out[i + 1] = str(files[out[i + 1]])
    return out


def _jetraft_options(argv: list[str]) -> ServerOptions:
    """What ``jetraft <argv>`` would run with, through the real argument parser."""
    assert argv[:1] == ["server"], argv
    opts = cli.server_options(argv[1:])
    assert opts.jetstream, "every deployment runs JetStream (-js or a jetstream block)"
    return opts


def _conf_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("node-*.conf"), key=lambda p: int(p.stem.split("-")[1]))


def _conf(path: Path) -> dict[str, Any]:
    return parse_config(path.read_text())


def _route_host(url: str) -> str:
    parts = urlsplit(url)
    assert parts.scheme == "nats", url
    assert parts.port == CLUSTER_PORT, url
    assert parts.hostname, url
    return parts.hostname


def _all_conf_files() -> list[Path]:
    return sorted(CONFIG_DIR.rglob("*.conf"))


# --- node configs -------------------------------------------------------------------------------


def test_every_conf_file_belongs_to_a_node_set() -> None:
    in_sets = {p for d, _ in NODE_SETS.values() for p in _conf_files(d)}
    assert set(_all_conf_files()) == in_sets
    for name, (directory, count) in NODE_SETS.items():
        names = [p.name for p in _conf_files(directory)]
        assert names == [f"node-{k}.conf" for k in range(1, count + 1)], name


@pytest.mark.parametrize("path", _all_conf_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_conf_file_has_what_a_cluster_node_needs(path: Path) -> None:
    conf = _conf(path)
    name = conf.get("server_name")
    assert isinstance(name, str) and name
    number = NODE_FILE.match(path.name)
    assert number is not None
    assert name == f"n{number.group(1)}", "node-K.conf must configure server nK"
    assert conf.get("listen") == f"0.0.0.0:{CLIENT_PORT}"
    assert conf.get("http_port") == MONITOR_PORT
    assert isinstance(conf.get("jetstream"), dict) and conf["jetstream"].get("store_dir")
    cluster = conf.get("cluster")
    assert isinstance(cluster, dict)
    assert isinstance(cluster.get("name"), str) and cluster["name"]
    assert cluster.get("listen") == f"0.0.0.0:{CLUSTER_PORT}"
    assert isinstance(cluster.get("routes"), list) and cluster["routes"]


@pytest.mark.parametrize("path", _all_conf_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_conf_file_is_accepted_by_jetraft(path: Path) -> None:
    conf = _conf(path)
    opts = _jetraft_options(["server", "-c", str(path)])
    assert opts.clustered
    assert opts.server_name == conf["server_name"]
    assert opts.cluster_name == conf["cluster"]["name"]
    assert (opts.host, opts.port, opts.http_port) == ("0.0.0.0", CLIENT_PORT, MONITOR_PORT)
    assert (opts.cluster_host, opts.cluster_port) == ("0.0.0.0", CLUSTER_PORT)
    assert opts.routes == conf["cluster"]["routes"]
    assert str(opts.store_dir) == conf["jetstream"]["store_dir"]
    _assert_route_security(opts)


@pytest.mark.parametrize("set_name", list(NODE_SETS))
def test_node_set_routes_list_every_node_exactly_once(set_name: str) -> None:
    directory, count = NODE_SETS[set_name]
    confs = [_conf(p) for p in _conf_files(directory)]
    assert len(confs) == count
    names = [c["server_name"] for c in confs]
    assert len(set(names)) == count, f"server names not distinct: {names}"
    assert len({c["cluster"]["name"] for c in confs}) == 1, "one cluster name per set"
    stores = [c["jetstream"]["store_dir"] for c in confs]
    assert len(set(stores)) == count, "two nodes would share a store directory"
    for conf in confs:
        routes = conf["cluster"]["routes"]
        assert routes == confs[0]["cluster"]["routes"], "every node must list the same routes"
        hosts = [_route_host(r) for r in routes]
        assert len(hosts) == count, f"{conf['server_name']}: {len(hosts)} routes for {count} nodes"
        assert len(set(hosts)) == count, f"duplicate route host in {hosts}"
        # the placeholder hostnames are <server_name>.<domain>: each node is named by one route
        first_labels = sorted(h.split(".", 1)[0] for h in hosts)
        assert first_labels == sorted(names)


def test_3_and_5_node_sets_agree_on_the_shared_nodes() -> None:
    small_dir, small_count = NODE_SETS["3-node"]
    big_dir, _ = NODE_SETS["5-node"]
    small = {p.name: _conf(p) for p in _conf_files(small_dir)}
    big = {p.name: _conf(p) for p in _conf_files(big_dir)}
    assert set(small) <= set(big)
    for name, conf in small.items():
        other = big[name]
        routes, other_routes = conf["cluster"].pop("routes"), other["cluster"].pop("routes")
        assert conf == other, f"{name}: the two sets differ in more than the routes"
        assert routes == other_routes[:small_count]


# --- systemd ------------------------------------------------------------------------------------


def _unit() -> dict[str, dict[str, list[str]]]:
    """INI-like unit file: section → key → every value the key was given, in order."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"key outside a section: {line!r}"
        assert "=" in line, f"not key=value: {line!r}"
        assert not line.endswith("\\"), "keep unit lines unbroken so they can be checked"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _seconds(value: str) -> float:
    units = {"": 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}
    m = re.fullmatch(r"(\d+)\s*([a-z]*)", value)
    assert m and m.group(2) in units, f"unsupported time span {value!r}"
    return int(m.group(1)) * units[m.group(2)]


def test_systemd_unit_runs_jetraft_with_the_instance_config() -> None:
    unit = _unit()
    assert set(unit) == {"Unit", "Service", "Install"}
    service = unit["Service"]
    (exec_start,) = service["ExecStart"]
    argv = exec_start.split()
    assert Path(argv[0]).name == "jetraft" and argv[0].startswith("/")
    assert argv[1:] == ["server", "-c", UNIT_CONF_PATH]
    (user,) = service["User"]
    assert user not in {"root", "0"}
    assert service["Restart"] == ["on-failure"]
    assert int(service["LimitNOFILE"][-1]) >= NOFILE_MIN
    assert _seconds(service["TimeoutStopSec"][-1]) >= STOP_GRACE_MIN_S
    assert service.get("KillSignal", ["SIGTERM"])[-1] == "SIGTERM"
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert "network-online.target" in unit["Unit"]["After"][-1].split()


def test_systemd_hardening_keeps_the_store_writable_and_the_network_usable() -> None:
    service = _unit()["Service"]
    writable = [f"/var/lib/{d}" for v in service.get("StateDirectory", []) for d in v.split()]
    writable += [p for v in service.get("ReadWritePaths", []) for p in v.split()]
    for path in _all_conf_files():
        conf = _conf(path)
        name, store = conf["server_name"], conf["jetstream"]["store_dir"]
        allowed = [w.replace("%i", name) for w in writable]
        assert any(store == w or store.startswith(w + "/") for w in allowed), (
            f"{path.name}: store_dir {store} is not writable under ProtectSystem (only {allowed})"
        )
    assert service.get("PrivateNetwork", ["no"])[-1] == "no"
    assert "IPAddressDeny" not in service
    families = " ".join(service.get("RestrictAddressFamilies", ["AF_INET AF_INET6"])).split()
    assert {"AF_INET", "AF_INET6"} <= set(families)
    assert not any(f.startswith("~") for f in families)
    for value in service.get("SystemCallFilter", []):
        groups = value.split()
        if value.startswith("~"):
            # a deny list must not remove fsync/fdatasync or socket calls
            assert not {"~@sync", "@sync", "@network-io"} & set(groups), value
        else:
            assert {"@system-service", "@sync"} & set(groups), value


# --- container image ----------------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "Dockerfile ends inside a continued line"
    out = []
    for line in lines:
        instr, _, rest = line.partition(" ")
        out.append((instr.upper(), rest.strip()))
    return out


def _one(instructions: list[tuple[str, str]], name: str) -> str:
    values = [rest for instr, rest in instructions if instr == name]
    assert values, f"no {name} in the Dockerfile"
    return values[-1]


def _volume() -> str:
    volume = _one(_dockerfile(), "VOLUME")
    paths = json.loads(volume) if volume.startswith("[") else volume.split()
    assert len(paths) == 1
    return str(paths[0])


def test_dockerfile_builds_a_non_root_jetraft_image() -> None:
    ins = _dockerfile()
    assert ins[0] == ("FROM", "python:3.11-slim")
    assert any(i == "RUN" and "pip install" in rest for i, rest in ins)
    user = _one(ins, "USER").split(":")[0]
    assert user not in {"root", "0"}
    assert any(i == "RUN" and "useradd" in rest and user in rest for i, rest in ins)
    assert set(_one(ins, "EXPOSE").split()) == {str(p) for p in (4222, 6222, 8222)}
    assert _volume().startswith("/")
    assert json.loads(_one(ins, "ENTRYPOINT")) == ["jetraft"]
    opts = _jetraft_options(json.loads(_one(ins, "CMD")))
    assert (opts.port, opts.http_port) == (CLIENT_PORT, MONITOR_PORT)
    assert str(opts.store_dir) == _volume()


def test_dockerfile_healthcheck_asks_healthz_with_python() -> None:
    check = _one(_dockerfile(), "HEALTHCHECK")
    options, _, command = check.partition("CMD ")
    assert "--interval" in options
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"]
    code = argv[2]
    compile(code, "<healthcheck>", "exec")
    assert "urllib" in code
    assert f":{MONITOR_PORT}/healthz" in code
    assert "timeout=" in code, "a hung node must fail the check, not hang it"


# --- docker compose -----------------------------------------------------------------------------


def _yaml_text(path: Path) -> str:
    text = path.read_text()
    assert "\t" not in text, f"{path.name}: YAML does not allow tabs for indentation"
    return text


def _children(text: str, parent: str, indent: int = 2) -> dict[str, str]:
    """The blocks under a top-level ``parent:`` key, by child key (structural, not full YAML)."""
    blocks: dict[str, str] = {}
    inside = False
    current: str | None = None
    child = re.compile(rf"^ {{{indent}}}([A-Za-z0-9_.-]+):\s*(.*)$")
    for line in text.splitlines():
        if re.match(r"^\S", line) and not line.startswith("#"):
            inside = line.rstrip() == f"{parent}:"
            current = None
            continue
        if not inside:
            continue
        m = child.match(line)
        if m:
            current = m.group(1)
            blocks[current] = m.group(2) + "\n"
        elif current is not None:
            blocks[current] += line + "\n"
    return blocks


def _compose_services() -> dict[str, str]:
    return _children(_yaml_text(COMPOSE), "services")


def _flow_list(block: str, key: str) -> list[str]:
    """``key: [ "a", "b" ]`` written with double-quoted strings, possibly over several lines."""
    m = re.search(rf"^\s*{key}:\s*(\[.*?\])\s*$", block, re.MULTILINE | re.DOTALL)
    assert m, f"no {key}: [...] flow sequence"
    value = json.loads(m.group(1))
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def _compose_bind_mounts(block: str) -> dict[str, Path]:
    """Container path -> repository path of a service's ``./host:container[:ro]`` mounts."""
    mounts = re.findall(r"^\s*-\s*(\./[^:\s]*):(/[^:\s]+)(?::ro)?\s*$", block, re.MULTILINE)
    return {inside: (COMPOSE.parent / host).resolve() for host, inside in mounts}


def _compose_env(arg: str) -> str:
    """Compose's ``${VAR:?message}`` substitution, with a stand-in value for every VAR."""
    return re.sub(r"\$\{(\w+)(?::?[?-][^}]*)?\}", lambda m: f"value-of-{m.group(1)}", arg)


def _compose_options(block: str) -> ServerOptions:
    command = _flow_list(block, "command")
    # the route password must come from the environment, and compose must refuse to run without
    assert any("${JETRAFT_ROUTE_PASSWORD:?" in arg for arg in command)
    argv = [_compose_env(arg) for arg in command]
    return _jetraft_options(_mapped_config(argv, _compose_bind_mounts(block)))


def test_compose_has_three_nodes_routed_by_service_name() -> None:
    services = _compose_services()
    assert tuple(services) == COMPOSE_NODES
    expected_routes = [f"nats://{n}:{CLUSTER_PORT}" for n in COMPOSE_NODES]
    for name, block in services.items():
        opts = _compose_options(block)
        _assert_route_security(opts)
        # the certificates directory is mounted where the TLS settings look for them
        assert _compose_bind_mounts(block).get(TLS_DIR.rstrip("/")) == COMPOSE.parent / "tls"
        assert opts.server_name == name
        assert opts.clustered and opts.cluster_port == CLUSTER_PORT
        assert opts.cluster_name
        assert opts.routes == expected_routes
        assert (opts.host, opts.port, opts.http_port) == ("0.0.0.0", CLIENT_PORT, MONITOR_PORT)
        assert str(opts.store_dir) == _volume(), "the store must be on the image's volume"
    names = {_compose_options(b).cluster_name for b in services.values()}
    assert len(names) == 1


def test_compose_maps_client_ports_and_gives_each_node_its_own_volume() -> None:
    text = _yaml_text(COMPOSE)
    services = _compose_services()
    host_client_ports = []
    node_volumes = []
    for name, block in services.items():
        ports = re.findall(r'^\s*-\s*"(?:[\d.]+:)?(\d+):(\d+)"', block, re.MULTILINE)
        client = [int(h) for h, c in ports if int(c) == CLIENT_PORT]
        assert len(client) == 1, f"{name}: one host port for the client port"
        host_client_ports.append(client[0])
        mounts = re.findall(rf"^\s*-\s*([A-Za-z0-9_-]+):{re.escape(_volume())}\s*$", block, re.M)
        assert len(mounts) == 1, f"{name}: one named volume on {_volume()}"
        node_volumes.append(mounts[0])
        # every service gets the shared settings (image, network, grace period) from the anchor
        assert re.search(r"^\s*<<: \*jetraft\s*$", block, re.MULTILINE), name
    assert tuple(host_client_ports) == COMPOSE_HOST_CLIENT_PORTS
    assert len(set(node_volumes)) == len(COMPOSE_NODES)
    assert set(_children(text, "volumes")) == set(node_volumes)
    networks = _children(text, "networks")
    assert len(networks) == 1
    shared = text.split("x-jetraft: &jetraft", 1)[1].split("\nservices:", 1)[0]
    assert re.search(rf"^\s*-\s*{next(iter(networks))}\s*$", shared, re.MULTILINE)
    grace = re.search(r"stop_grace_period:\s*(\d+)s", shared)
    assert grace and int(grace.group(1)) >= STOP_GRACE_MIN_S
    context = re.search(r"context:\s*(\S+)", shared)
    dockerfile = re.search(r"dockerfile:\s*(\S+)", shared)
    assert context and dockerfile
    build_root = (COMPOSE.parent / context.group(1)).resolve()
    assert build_root == ROOT, "build context must be the repository (pip install .)"
    assert (build_root / dockerfile.group(1)).resolve() == DOCKERFILE.resolve()


# --- Kubernetes ---------------------------------------------------------------------------------


def _k8s_docs() -> dict[tuple[str, str], str]:
    docs: dict[tuple[str, str], str] = {}
    for doc in re.split(r"^---\s*$", _yaml_text(K8S), flags=re.MULTILINE):
        kind = re.search(r"^kind:\s*(\S+)\s*$", doc, re.MULTILINE)
        if kind is None:
            continue
        name = re.search(r"^metadata:\s*\n\s+name:\s*(\S+)\s*$", doc, re.MULTILINE)
        assert name, f"{kind.group(1)} without metadata.name"
        docs[(kind.group(1), name.group(1))] = doc
    return docs


def _section(doc: str, key: str) -> str:
    """The lines nested under the one ``key:`` line of ``doc`` (by indentation)."""
    lines = doc.splitlines()
    starts = [
        i for i, line in enumerate(lines) if re.match(rf"^\s*(- )?{re.escape(key)}:\s*$", line)
    ]
    assert len(starts) == 1, f"{key}: expected one block, found {len(starts)}"
    indent = len(lines[starts[0]]) - len(lines[starts[0]].lstrip(" -"))
    body = []
    for line in lines[starts[0] + 1 :]:
        if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
            break
        body.append(line)
    assert any(line.strip() for line in body), f"{key}: empty block"
    return "\n".join(body) + "\n"


def _expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` substitution in args (a missing VAR is left as written)."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def _statefulset() -> tuple[str, str]:
    sets = [(name, doc) for (kind, name), doc in _k8s_docs().items() if kind == "StatefulSet"]
    assert len(sets) == 1
    return sets[0]


def _field(doc: str, key: str) -> str:
    values = re.findall(rf"^\s*{re.escape(key)}:\s*(\S+)\s*$", doc, re.MULTILINE)
    assert len(values) == 1, f"{key}: expected one value, found {values}"
    return str(values[0])


def test_k8s_services_headless_for_peers_and_one_for_clients() -> None:
    docs = _k8s_docs()
    sts_name, sts = _statefulset()
    services = {name: doc for (kind, name), doc in docs.items() if kind == "Service"}
    headless = services.get(_field(sts, "serviceName"))
    assert headless is not None, "serviceName must name the headless Service"
    assert _field(headless, "clusterIP") == "None"
    # readiness needs a joined cluster, joining needs peer DNS: records before readiness
    assert _field(headless, "publishNotReadyAddresses") == "true"
    assert int(_field(headless, "port")) == CLUSTER_PORT
    clients = [d for n, d in services.items() if n != _field(sts, "serviceName")]
    assert len(clients) == 1
    ports = {int(p) for p in re.findall(r"^\s*port:\s*(\d+)\s*$", clients[0], re.MULTILINE)}
    assert CLIENT_PORT in ports
    label = re.search(r"app\.kubernetes\.io/name:\s*(\S+)", sts)
    assert label and label.group(1) == sts_name
    for doc in services.values():
        assert _field(_section(doc, "selector"), "app.kubernetes.io/name") == label.group(1)


def _k8s_config_files(tmp_path: Path, sts: str) -> dict[str, Path]:
    """Container path -> a copy of the ConfigMap file mounted there."""
    files: dict[str, Path] = {}
    for (kind, name), doc in _k8s_docs().items():
        if kind != "ConfigMap":
            continue
        data = re.search(r"^data:\s*\n((?:  .*\n?|\s*\n)+)", doc, re.MULTILINE)
        assert data, f"ConfigMap {name} without data"
        entries = re.split(r"^  ([\w.-]+): \|\s*\n", data.group(1), flags=re.MULTILINE)[1:]
        volume = re.search(
            rf"-\s*name:\s*(\S+)\s*\n\s*configMap:\s*\n\s*name:\s*{re.escape(name)}\s*$",
            sts,
            re.MULTILINE,
        )
        assert volume, f"ConfigMap {name} is not a volume of the StatefulSet"
        mount = re.search(
            rf"-\s*name:\s*{re.escape(volume.group(1))}\s*\n\s*mountPath:\s*(\S+)", sts
        )
        assert mount, f"volume {volume.group(1)} is not mounted"
        for key, text in zip(entries[::2], entries[1::2], strict=True):
            copy = tmp_path / key
            copy.write_text("\n".join(line[4:] for line in text.splitlines()) + "\n")
            files[f"{mount.group(1)}/{key}"] = copy
    return files


def test_k8s_route_tls_certificates_come_from_a_secret() -> None:
    _, sts = _statefulset()
    volume = re.search(
        r"-\s*name:\s*(\S+)\s*\n\s*secret:\s*\n\s*secretName:\s*(\S+)", sts, re.MULTILINE
    )
    assert volume and volume.group(2) == "jetraft-route-tls"
    mount = re.search(rf"-\s*name:\s*{re.escape(volume.group(1))}\s*\n\s*mountPath:\s*(\S+)", sts)
    assert mount and mount.group(1) == TLS_DIR.rstrip("/")


def test_make_route_certs_script_is_posix_sh_and_documented() -> None:
    text = MAKE_CERTS.read_text()
    assert text.startswith("#!/bin/sh\n") and "set -eu" in text
    for name in ("route.pem", "route-key.pem", "ca.pem"):
        assert name in text
    assert "deploy/tls/make-route-certs.sh" in README.read_text()


def test_k8s_statefulset_runs_a_raft_cluster(tmp_path: Path) -> None:
    name, sts = _statefulset()
    assert int(_field(sts, "replicas")) == K8S_REPLICAS
    assert _field(sts, "podManagementPolicy") == "Parallel"
    assert int(_field(sts, "terminationGracePeriodSeconds")) >= STOP_GRACE_MIN_S
    assert "volumeClaimTemplates:" in sts
    claim = re.search(r"volumeClaimTemplates:\s*\n\s*-\s*metadata:\s*\n\s*name:\s*(\S+)", sts)
    assert claim
    mount = re.search(rf"-\s*name:\s*{claim.group(1)}\s*\n\s*mountPath:\s*(\S+)", sts)
    assert mount, "the claim must be mounted"
    ports = dict(re.findall(r"-\s*name:\s*(\S+)\s*\n\s*containerPort:\s*(\d+)", sts))
    assert sorted(int(p) for p in ports.values()) == [CLIENT_PORT, CLUSTER_PORT, MONITOR_PORT]
    probe = _section(sts, "readinessProbe")
    assert _field(_section(probe, "httpGet"), "path") == "/healthz"
    probe_port = _field(_section(probe, "httpGet"), "port")
    assert MONITOR_PORT in {int(ports.get(probe_port, probe_port))}, "probe the monitor port"
    anti = _section(sts, "podAntiAffinity")
    preferred = _section(anti, "preferredDuringSchedulingIgnoredDuringExecution")
    assert _field(preferred, "topologyKey") == "kubernetes.io/hostname"

    env = dict(
        re.findall(
            r"-\s*name:\s*(\w+)\s*\n\s*valueFrom:\s*\n\s*fieldRef:\s*\n"
            r"\s*fieldPath:\s*(\S+)",
            sts,
        )
    )
    assert env.get("POD_NAME") == "metadata.name"
    secrets = dict(
        re.findall(
            r"-\s*name:\s*(\w+)\s*\n\s*valueFrom:\s*\n\s*secretKeyRef:\s*\n"
            r"\s*name:\s*(\S+)",
            sts,
        )
    )
    assert secrets.get("JETRAFT_ROUTE_PASSWORD") == "jetraft-routes", "route password from a Secret"
    env.update(secrets)
    args = _flow_list(sts, "args")
    config_files = _k8s_config_files(tmp_path, sts)
    used = set(re.findall(r"\$\((\w+)\)", " ".join(args)))
    assert used <= set(env), f"Kubernetes leaves undeclared $(VAR) unexpanded: {used - set(env)}"
    namespace = "prod"
    values = {"metadata.name": None, "metadata.namespace": namespace}
    for ordinal in range(K8S_REPLICAS):
        pod = f"{name}-{ordinal}"
        subst = {var: (values[path] or pod) for var, path in env.items() if path in values}
        argv = _mapped_config([_expand(a, subst) for a in args], config_files)
        opts = _jetraft_options(argv)
        _assert_route_security(opts)
        assert opts.server_name == pod
        assert opts.clustered and opts.cluster_port == CLUSTER_PORT and opts.cluster_name
        assert (opts.port, opts.http_port) == (CLIENT_PORT, MONITOR_PORT)
        assert str(opts.store_dir) == mount.group(1)
        assert opts.routes == [
            f"nats://{name}-{i}.{_field(sts, 'serviceName')}.{namespace}.svc:{CLUSTER_PORT}"
            for i in range(K8S_REPLICAS)
        ]


# --- README -------------------------------------------------------------------------------------


def test_readme_refers_only_to_files_that_exist() -> None:
    text = README.read_text()
    referenced = set(re.findall(r"\bdeploy/[\w./@-]*[\w@]", text))
    assert referenced, "the README should point at the files it explains"
    missing = sorted(r for r in referenced if not (ROOT / r).exists())
    assert missing == []
    for port in (CLIENT_PORT, CLUSTER_PORT, MONITOR_PORT):
        assert str(port) in text
