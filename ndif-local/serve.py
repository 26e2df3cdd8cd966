"""A self-hosted NDIF on 127.0.0.1: Redis, Postgres (API keys), an S3 store, a Ray head, the API.

Used by the tests' ``ndif`` fixture, ``make ndif`` and ``bench/bench_remote.py``. Only the
standard library here: the services run from the server's own virtual environment
(``.ndif-venv``, see ``requirements.txt``), which has no interplab. Every process is started in
its own session, recorded, and stopped by its process group; processes it spawned that escaped
the group (Ray workers) are found by a marker in their environment and stopped by pid.

    python ndif-local/serve.py [--model FOLDER] [--no-auth]     # runs until Ctrl-C

Example
-------
>>> server = start(model_dir)          # about a minute; server.host, server.api_key, server.model_key
>>> server.stop()
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import netns  # noqa: E402 - beside this file, not a package

MARKER = "ILAB_NDIF_RUN"
MODEL_CLASS = "nnsight.modeling.transformers.TransformersModel"
SCHEMA = """
CREATE TABLE users (user_id uuid PRIMARY KEY, email text);
CREATE TABLE keys (key_id uuid PRIMARY KEY, user_id uuid REFERENCES users);
CREATE TABLE user_tags (user_tag_id serial PRIMARY KEY, name text);
CREATE TABLE key_user_tag_assignments (key_id uuid REFERENCES keys, user_tag_id int REFERENCES user_tags);
"""


def server_python() -> Path:
    """The server venv's python (``$ILAB_NDIF_VENV`` or ``.ndif-venv`` beside the repository)."""
    venv = Path(os.environ.get("ILAB_NDIF_VENV") or REPO / ".ndif-venv")  # unset or empty: the default
    python = venv / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(f"No NDIF server environment at {venv}: run `make ndif-env` first.")
    return python


def model_key(folder: str | Path, task: str = "text-generation") -> str:
    """The key nnsight sends for a model that a server loads from ``folder``."""
    return f"{MODEL_CLASS}:" + json.dumps({"repo_id": str(folder), "revision": None, "task": task})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _wait(what: str, ok, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if ok():
                return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    if proc is not None and proc.poll() is not None:
        raise RuntimeError(f"NDIF: {what} exited with status {proc.returncode} before it came up.\n{tail}")
    raise RuntimeError(f"NDIF: {what} did not come up in {timeout:.0f} s.\n{tail}")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Server:
    """A running self-hosted NDIF; :meth:`stop` ends every process it started."""

    host: str
    api_key: str | None
    model_key: str
    model_name: str  # the name the server knows the model by (its folder on the server)
    workdir: Path
    run_id: str
    ports: dict[str, int] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    own_workdir: bool = True
    env: dict[str, str] = field(default_factory=dict, repr=False)
    net: netns.PrivateNet | None = field(default=None, repr=False)

    def inside(self, cmd: list[str]) -> list[str]:
        """``cmd`` run inside the services' private network (unchanged without one)."""
        return [*self.net.prefix(), *cmd] if self.net is not None else cmd

    def port_open(self, port: int) -> bool:
        return self.net.port_open(port) if self.net is not None else _port_open(port)

    def expose(self, port: int) -> None:
        """Make 127.0.0.1:``port`` of the private network reachable at 127.0.0.1:``port`` here."""
        if self.net is not None:
            self.net.forward(port)

    def start_api(self, extra_env: dict[str, str], timeout: float = 60.0) -> str:
        """A second API on the same services (no dispatcher of its own) with other settings; returns its URL."""
        port = free_port()
        bindir = server_python().parent
        cmd = [str(bindir / "gunicorn"), "--config", "python:api_only_conf", "--bind", f"127.0.0.1:{port}",
               "ndif.services.api.app:app"]  # fmt: skip
        name = f"api-{port}"
        proc = self._spawn(name, cmd, {**self.env, **extra_env, "NDIF_API_PORT": str(port)})
        self.expose(port)
        host = f"http://127.0.0.1:{port}"
        _wait("the second API", lambda: _get(host + "/ping")[0] == 200, timeout, proc, self.workdir / f"{name}.log")
        return host

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], user: str | None = None) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        if user is not None:
            cmd = ["runuser", "-u", user, "--", *cmd]
        proc = subprocess.Popen(self.inside(cmd), env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.workdir)  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        """SIGTERM each process group (newest first), SIGKILL what is left, then any marked stray process."""
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for pid in marked_pids(self.run_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.procs.clear()
        if self.net is not None:
            self.net.close()
            self.net = None
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def marked_pids(run_id: str) -> list[int]:
    """Pids of live processes whose environment carries this run's marker."""
    needle = f"{MARKER}={run_id}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    out.append(int(entry.name))
    return out


def _cache_as(hub: Path, repo_id: str, folder: Path) -> None:
    """Lay ``folder``'s files out as a Hugging Face cache entry of ``repo_id`` (links, one snapshot)."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text("0" * 40)
    for f in folder.iterdir():
        if f.is_file() and not (snapshot / f.name).exists():
            (snapshot / f.name).symlink_to(f)


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    return found[-1].parent if found else None


def _start_postgres(server: Server, env: dict[str, str]) -> str:
    """A throwaway Postgres holding one API key; returns its URL."""
    bindir = _postgres_bin()
    if bindir is None:
        raise FileNotFoundError("Postgres is not installed (Debian: apt-get install postgresql); needed for API keys.")
    data = server.workdir / "pg"
    data.mkdir()
    user = "postgres" if os.geteuid() == 0 else None  # Postgres refuses to run as root
    if user:
        shutil.chown(server.workdir, user)
        shutil.chown(data, user)
    run = ["runuser", "-u", user, "--"] if user else []
    subprocess.run([*run, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"], check=True,
                   capture_output=True, env=env)  # fmt: skip
    port = server.ports["postgres"] = free_port()
    cmd = [str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port), "-k", str(data),
           "-c", "fsync=off", "-c", "shared_buffers=16MB"]  # fmt: skip
    proc = server._spawn("postgres", cmd, env, user)
    _wait("Postgres", lambda: server.port_open(port), 30, proc, server.workdir / "postgres.log")
    psql = [*server.inside([]), str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
            "-v", "ON_ERROR_STOP=1", "-q"]  # fmt: skip
    _wait("Postgres", lambda: subprocess.run([*psql, "-c", "select 1"], capture_output=True, env=env).returncode == 0,
          30)  # fmt: skip
    subprocess.run([*psql, "-c", "CREATE DATABASE ndif"], check=True, capture_output=True, env=env)
    user_id = str(uuid.uuid4())
    seed = SCHEMA + f"INSERT INTO users VALUES ('{user_id}', 'tests@localhost');\n"
    seed += f"INSERT INTO keys VALUES ('{server.api_key}', '{user_id}');\n"
    subprocess.run([*psql, "-d", "ndif", "-c", seed], check=True, capture_output=True, env=env)
    return f"postgresql://postgres@127.0.0.1:{port}/ndif"


def start(
    model_dir: str | Path, *, auth: bool = True, dtype: str = "float32", workdir: str | Path | None = None,
    timeout: float = 300.0, deploy: bool = True, extra_env: dict[str, str] | None = None, hub_alias: str | None = None,
    private_net: bool = True,
) -> Server:  # fmt: skip
    """Start every service, deploy ``model_dir`` (served from a link in the work folder) and return the server.

    With ``private_net`` (and root) every service runs in a network namespace of its own (Ray listens on
    all interfaces whatever it is told), and only the API and the S3 store are forwarded to 127.0.0.1 here.
    ``hub_alias`` (e.g. ``"google/gemma-3-270m"``) also puts the model in the server's Hugging Face cache
    under that id, so the server lists it as downloaded but not deployed (COLD), as NDIF lists Hub models.
    """
    t0 = time.monotonic()
    python = server_python()
    bindir = python.parent
    own = workdir is None
    # Short: Ray's unix socket paths must stay under about 100 characters.
    work = Path(tempfile.mkdtemp(prefix="ilab-ndif-", dir="/tmp")) if own else Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:12]
    served = work / "models" / Path(model_dir).name
    served.parent.mkdir(parents=True, exist_ok=True)
    if not served.exists():
        served.symlink_to(Path(model_dir).resolve(), target_is_directory=True)
    server = Server(host="", api_key=str(uuid.uuid4()) if auth else None, model_key=model_key(served),
                    model_name=str(served), workdir=work, run_id=run_id, own_workdir=own)  # fmt: skip
    if hub_alias:
        _cache_as(work / "hf" / "hub", hub_alias, Path(model_dir).resolve())
    try:
        if private_net and netns.available():
            server.net = netns.PrivateNet({MARKER: run_id, "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        _start_all(server, python, bindir, auth, dtype, extra_env or {}, timeout)
        server.timings["services_s"] = round(time.monotonic() - t0, 1)
        if deploy:
            t1 = time.monotonic()
            _deploy(server, python, timeout)
            server.timings["deploy_s"] = round(time.monotonic() - t1, 1)
    except BaseException:
        server.stop()
        raise
    server.timings["total_s"] = round(time.monotonic() - t0, 1)
    return server


def _start_all(server: Server, python: Path, bindir: Path, auth: bool, dtype: str, extra: dict[str, str],
               timeout: float) -> None:  # fmt: skip
    work = server.workdir
    ports = server.ports
    for name in ("redis", "s3", "ray", "ray_client", "dashboard", "api", "object_manager", "node_manager",
                 "metrics", "agent_grpc", "agent_http", "runtime_env_agent"):  # fmt: skip
        ports[name] = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NDIF_", "RAY_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    env.update({
        MARKER: server.run_id,
        "PATH": f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(HERE),
        "HOME": str(work),
        "HF_HOME": str(work / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "GRPC_ENABLE_FORK_SUPPORT": "0",
        "NDIF_HOME": str(work / "ndif"),
        "NDIF_ENVIRONMENT": "test",
        "NDIF_INFLUX_ENABLED": "false",
        "NDIF_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}",
        "NDIF_OBJECT_STORE_URL": f"http://127.0.0.1:{ports['s3']}",
        "NDIF_OBJECT_STORE_ACCESS_KEY": "test",
        "NDIF_OBJECT_STORE_SECRET_KEY": "test",
        "NDIF_RAY_ADDRESS": f"ray://127.0.0.1:{ports['ray_client']}",
        "NDIF_API_URL": f"http://127.0.0.1:{ports['api']}",
        "NDIF_API_PORT": str(ports["api"]),
        "NDIF_MODEL_IMPORT_PATH": "cpu_actor.CPUModelActor",
        "NDIF_DEFAULT_DTYPE": dtype,
        "NDIF_MODEL_CACHE_PERCENTAGE": "0.1",
        "NDIF_DEFAULT_EXECUTION_TIMEOUT_SECONDS": "600",
        "OMP_NUM_THREADS": "2",
    })  # fmt: skip
    env.update(extra)
    server.env = env
    if auth:
        env["NDIF_POSTGRES_URL"] = _start_postgres(server, env)

    proc = server._spawn("redis", ["redis-server", "--port", str(ports["redis"]), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", str(work)], env)  # fmt: skip
    _wait("Redis", lambda: server.port_open(ports["redis"]), 20, proc, work / "redis.log")
    proc = server._spawn("s3", [str(bindir / "moto_server"), "-H", "127.0.0.1", "-p", str(ports["s3"])], env)
    _wait("the S3 store (moto)", lambda: server.port_open(ports["s3"]), 60, proc, work / "s3.log")
    server.expose(ports["s3"])  # results too large for the websocket are downloaded from it

    resources = json.dumps({"head": 10, "cuda_memory_bytes": 16 * 1024**3, "cpu_memory_bytes": 8 * 1024**3})
    ray = [
        str(bindir / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
        f"--port={ports['ray']}", f"--ray-client-server-port={ports['ray_client']}", "--num-cpus=4", "--num-gpus=1",
        f"--resources={resources}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
        f"--dashboard-port={ports['dashboard']}", f"--object-manager-port={ports['object_manager']}",
        f"--node-manager-port={ports['node_manager']}", f"--metrics-export-port={ports['metrics']}",
        f"--dashboard-agent-grpc-port={ports['agent_grpc']}", f"--dashboard-agent-listen-port={ports['agent_http']}",
        f"--runtime-env-agent-port={ports['runtime_env_agent']}", "--object-store-memory=200000000",
        f"--temp-dir={work / 'ray'}", "--disable-usage-stats",
    ]  # fmt: skip
    proc = server._spawn("ray", ray, env)
    _wait("the Ray head", lambda: server.port_open(ports["ray_client"]) and server.port_open(ports["dashboard"]),
          timeout, proc, work / "ray.log")  # fmt: skip
    controller = subprocess.run(
        server.inside([str(python), "-m", "ndif.services.ray.deployments.controller.controller"]),
        env={**env, "RAY_ADDRESS": f"127.0.0.1:{ports['ray']}"}, cwd=work, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    if controller.returncode != 0:
        out = controller.stdout[-2000:] + controller.stderr[-2000:]
        raise RuntimeError(f"NDIF: the controller did not start:\n{out}")
    gunicorn = [str(bindir / "gunicorn"), "--config", "python:ndif.services.api.gunicorn_conf",
                "--bind", f"127.0.0.1:{ports['api']}", "ndif.services.api.app:app"]  # fmt: skip
    proc = server._spawn("api", gunicorn, env)
    server.expose(ports["api"])
    server.host = f"http://127.0.0.1:{ports['api']}"
    _wait("the API", lambda: _get(server.host + "/connected")[0] == 200, timeout, proc, work / "api.log")


def deploy(server: Server, model_dir: str | Path, timeout: float = 300.0) -> str:
    """Deploy one more model on a running ``server`` (served from a link in its work folder, like the first);
    returns the name the server knows it by.

    >>> name = deploy(server, prepare_embedded_model(name="smollm2-135m-instruct"))
    """
    served = server.workdir / "models" / Path(model_dir).name
    if not served.exists():
        served.symlink_to(Path(model_dir).resolve(), target_is_directory=True)
    _deploy_one(server, server_python(), str(served), model_key(served), timeout)
    _wait(f"the listing of {served.name} in /status", lambda: _lists(server, str(served)), timeout)
    return str(served)


def _lists(server: Server, name: str) -> bool:
    """Whether the server's ``/status`` lists ``name`` (a deployment is READY before the listing catches up)."""
    headers = {"ndif-api-key": server.api_key} if server.api_key else {}
    request = urllib.request.Request(f"{server.host}/status", headers=headers)
    with urllib.request.urlopen(request, timeout=5) as r:
        deployments = (json.loads(r.read().decode()).get("deployments") or {}).values()
    return any(entry.get("repo_id") == name for entry in deployments)


def _deploy(server: Server, python: Path, timeout: float) -> None:
    """Deploy the model and wait for its replica (the first request would otherwise do it)."""
    _deploy_one(server, python, server.model_name, server.model_key, timeout)


def _deploy_one(server: Server, python: Path, name: str, key: str, timeout: float) -> None:
    code = (
        "import json, sys\nfrom ndif.cli.lib.deploy import deploy\n"
        "spec = {'checkpoint': sys.argv[1], 'model_key': sys.argv[2], 'task': 'text-generation'}\n"
        "out = deploy([spec], on_message=lambda m: print(m, flush=True))\n"
        "bad = [d for d in out['deployments'] if d['status'] != 'READY']\nsys.exit(json.dumps(bad) if bad else 0)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NDIF_", "RAY_"))}
    env.update({
        MARKER: server.run_id, "PYTHONPATH": str(HERE), "HF_HUB_OFFLINE": "1", "HOME": str(server.workdir),
        "NDIF_RAY_ADDRESS": f"ray://127.0.0.1:{server.ports['ray_client']}",
        "NDIF_REDIS_URL": f"redis://127.0.0.1:{server.ports['redis']}", "NDIF_INFLUX_ENABLED": "false",
    })  # fmt: skip
    out = subprocess.run(server.inside([str(python), "-c", code, name, key]), env=env,
                         cwd=server.workdir,
                         capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"NDIF: deploying {name} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="model folder to serve (default: the prepared embedded model)")
    parser.add_argument("--no-auth", action="store_true", help="no API keys (no Postgres)")
    args = parser.parse_args()
    if args.model is None:
        from interplab.core.loading.embedded import prepare_embedded_model

        args.model = prepare_embedded_model()
    server = start(args.model, auth=not args.no_auth)
    info = {"host": server.host, "api_key": server.api_key, "model": server.model_name, **server.timings}
    sys.stdout.write(json.dumps(info, indent=1) + "\n")
    sys.stdout.write("Use it: ilab.load_model(model, remote=host) with NDIF_API_KEY=api_key. Ctrl-C stops it.\n")
    sys.stdout.flush()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
