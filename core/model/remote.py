"""Talking to an NDIF server: where it is, what it hosts, whether this client fits, clear errors.

Everything here answers within seconds and before any weight is loaded: :func:`connect` reaches
the server (``/ping``), reads its packages (``/env``) to compare nnsight versions, and reads the
models it hosts (``/status``, with each model's config, so no Hugging Face access is needed to
build the model's skeleton here). :class:`Backend` is the nnsight remote backend every interplab
trace of a remote model goes through: it turns the server's refusals into errors that say what
to do, and submits non-blocking jobs (:mod:`interplab.core.jobs` resumes them by id).

Example
-------
>>> server = connect("http://127.0.0.1:8001")        # or True: $NDIF_HOST / nnsight's default
>>> server.hosted[0].name, server.nnsight_version
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from nnsight.intervention.backends.remote import RemoteBackend, RemoteError
from nnsight.schema.config import CONFIG

from ..storage.atomic import write_json

logger = logging.getLogger(__name__)

#: Seconds to wait for the server to answer a status question.
TIMEOUT_S = 5.0
#: Tensors one request may carry: ndif 0.1.2 answers "There was an error parsing the body" for request
#: bodies above 1 MiB (1.0 MiB accepted, 1.04 MiB refused, measured on the self-hosted server).
REQUEST_BYTES = 800_000


class RemoteModelError(RuntimeError):
    """A remote model cannot be used as asked; the message says what to do."""


def client_nnsight() -> str:
    """The nnsight version of this process."""
    return package_version("nnsight")


def compatible(client: str, server: str) -> bool:
    """Whether an nnsight client can talk to a server: the same major and minor version.

    Measured against ndif 0.1.2: clients 0.8.0 and 0.8.1 both run every interplab operation on
    a server with nnsight 0.8.0 (the request format is source code plus pickles of nnsight's own
    classes, which change between minor versions).
    """
    return client.split(".")[:2] == server.split(".")[:2]


@dataclass(frozen=True)
class Hosted:
    """One model a server hosts: the name and key it knows it by, its config, its dtype."""

    name: str
    model_key: str
    config: dict[str, Any] | None = None
    dtype: str | None = None
    state: str = ""


@dataclass
class Server:
    """What :func:`connect` learnt about an NDIF server."""

    host: str
    api_key: str | None
    nnsight_version: str | None = None
    hosted: list[Hosted] = field(default_factory=list)

    def find(self, name: str) -> Hosted | None:
        """The hosted model called ``name`` (its repo id or the folder the server loads it from)."""
        return next((h for h in self.hosted if h.name == name), None)

    def names(self) -> list[str]:
        return [h.name for h in self.hosted]


def resolve_host(remote: bool | str) -> str:
    """The server URL of ``remote=``: a URL as given; ``True`` is ``$NDIF_HOST`` or nnsight's default."""
    if isinstance(remote, str) and remote.startswith(("http://", "https://")):
        return remote.rstrip("/")
    return str(os.environ.get("NDIF_HOST") or CONFIG.API.HOST).rstrip("/")


def api_key() -> str | None:
    """The API key requests carry: ``$NDIF_API_KEY`` or nnsight's configured key."""
    return os.environ.get("NDIF_API_KEY") or CONFIG.API.APIKEY or None


def _get(url: str, key: str | None) -> Any:
    import httpx

    headers = {"ndif-api-key": key} if key else {}
    response = httpx.get(url, headers=headers, timeout=TIMEOUT_S)
    response.raise_for_status()
    return response.json()


def connect(remote: bool | str) -> Server:
    """Reach the NDIF server of ``remote=``, check nnsight versions and read the hosted models.

    Raises :class:`RemoteModelError` naming the host when it cannot be reached, and naming both
    nnsight versions and the pip command when they do not fit.
    """
    import httpx

    host, key = resolve_host(remote), api_key()
    server = Server(host, key)
    try:
        _get(f"{host}/ping", None)
    except (httpx.HTTPError, ValueError) as err:
        raise RemoteModelError(
            f"Cannot reach the NDIF server at {host} ({type(err).__name__}: {err}). Check the address "
            "(remote='http://host:port', or $NDIF_HOST for remote=True) and that the server is running; "
            "`make ndif` starts one on this machine."
        ) from None
    try:
        env = _get(f"{host}/env", key)
        server.nnsight_version = env.get("packages", {}).get("nnsight")
    except (httpx.HTTPError, ValueError) as err:
        logger.warning("Could not read the packages of %s (%s); nnsight versions not compared.", host, err)
    check_versions(server.nnsight_version, host)
    check_key(host, key)
    try:
        status = _get(f"{host}/status", key)
    except (httpx.HTTPError, ValueError) as err:
        logger.warning("Could not read the models %s hosts (%s).", host, err)
        status = {}
    for entry in (status.get("deployments") or {}).values():
        name = entry.get("repo_id")
        if not name:
            continue
        config = entry.get("config")
        server.hosted.append(Hosted(
            name=name, model_key=entry.get("model_key") or "", config=json.loads(config) if config else None,
            dtype=entry.get("dtype"), state=entry.get("deployment_level") or entry.get("application_state") or "",
        ))  # fmt: skip
    return server


def check_versions(server_nnsight: str | None, host: str) -> None:
    """Refuse a client whose nnsight cannot talk to the server's, naming both and the fix."""
    client = client_nnsight()
    if server_nnsight and not compatible(client, server_nnsight):
        raise RemoteModelError(version_message(client, server_nnsight, host))


def check_key(host: str, key: str | None) -> None:
    """Ask the server whether it takes ``key``, without submitting anything.

    The probe is a request with no payload: the server checks the key first (401 missing,
    400 malformed, 403 unknown) and refuses the empty request next (422), so nothing is queued.
    """
    import httpx

    headers = {"ndif-api-key": key} if key else {}
    try:
        response = httpx.post(f"{host}/request", data={"data": json.dumps({"model_key": "interplab-key-check"})},
                              headers=headers, timeout=TIMEOUT_S)  # fmt: skip
    except httpx.HTTPError as err:
        logger.warning("Could not check the API key with %s (%s).", host, err)
        return
    if response.status_code in (400, 401, 403):
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        better = explain(RemoteError(f"Failed to send request: {detail}"), host)
        if better is not None:
            raise better
    if response.status_code == 503:
        raise RemoteModelError(f"The NDIF server at {host} is up but its compute backend is not connected; try later.")


def version_message(client: str, server: str | None, host: str, detail: str = "") -> str:
    """Both nnsight versions and the pip command that makes them fit (the server's stated minimum if any)."""
    import re

    minimum = re.search(r"minimum supported (\S+?)\.?(\s|$)", detail)
    if minimum:
        need, fix = f"needs nnsight >= {minimum.group(1)}", f"pip install 'nnsight>={minimum.group(1)}'"
    elif server:
        need, fix = f"runs nnsight {server}", f"pip install 'nnsight=={server}'"
    else:
        need, fix = "refuses this client's nnsight", "pip install --upgrade nnsight"
    runs = f" (it runs nnsight {server})" if server and minimum else ""
    return (
        f"The NDIF server at {host} {need}{runs}; this Python has nnsight {client} ({sys.executable}). "
        f"Fix: {fix}, then restart the kernel (interplab is tested with nnsight {client}), or use a server "
        f"on nnsight {'.'.join(client.split('.')[:2])}.x." + (f" Server said: {detail}" if detail else "")
    )


def explain(error: BaseException, host: str, server_nnsight: str | None = None) -> RemoteModelError | None:
    """An error that says what to do for a failure of a remote request (None: leave it as it is)."""
    text = str(error)
    if "API key" in text or "Missing or invalid" in text:
        where = "$NDIF_API_KEY" if os.environ.get("NDIF_API_KEY") else "no key is set"
        if "Missing" in text:
            return RemoteModelError(
                f"The NDIF server at {host} needs an API key and {where}. Set one: "
                "os.environ['NDIF_API_KEY'] = '...' before load_model (or nnsight.CONFIG.set_default_api_key)."
            )
        return RemoteModelError(
            f"The NDIF server at {host} rejected the API key ({where}: {text.split(':', 1)[-1].strip()}). "
            "Check the key (for the public NDIF: https://login.ndif.us) and set it in $NDIF_API_KEY."
        )
    if "nnsight version" in text:
        return RemoteModelError(version_message(client_nnsight(), server_nnsight, host, text))
    if "error parsing the body" in text:
        return RemoteModelError(
            f"The NDIF server at {host} could not read the request (it refuses bodies above about 1 MB: "
            "ndif 0.1.2 under gunicorn). Send less per trace: a smaller batch_size, fewer rows, or smaller tensors."
        )
    if "Could not deploy" in text or "not hosted" in text:
        return RemoteModelError(f"The NDIF server at {host} could not run this model: {text}")
    return None


class Journal:
    """The NDIF requests a long job has in flight, on disk, so a restarted kernel polls them by id.

    Each request is keyed by what it computes (the model, the traced code and its input tensors),
    not by when it was made, so the same request from a resumed job finds its id again.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.polled_existing = 0  # requests found in flight and polled instead of sent again
        self.sent = 0

    def _read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def pending(self, key: str) -> str | None:
        return self._read().get("pending", {}).get(key)

    def set(self, key: str, job_id: str | None) -> None:
        record = self._read()
        pending = record.setdefault("pending", {})
        if job_id is None:
            pending.pop(key, None)
        else:
            pending[key] = job_id
        write_json(self.path, record)


#: The journal of the job running in this thread (a job sets it in its own thread only).
JOURNAL: ContextVar[Journal | None] = ContextVar("interplab_journal", default=None)


def request_key(tracer: Any, model_key: str) -> str:
    """A key of what a trace computes: the model, the traced code and its input tensors."""
    import ast

    import torch

    h = hashlib.sha256(model_key.encode())
    h.update(ast.unparse(tracer.node).encode())

    def add(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            h.update(f"{tuple(value.shape)}{value.dtype}".encode())
            h.update(value.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(value, dict):
            for k in sorted(value):
                h.update(str(k).encode())
                add(value[k])
        elif isinstance(value, (list, tuple)):
            for v in value:
                add(v)
        else:
            h.update(repr(value).encode())

    add(tracer.args)
    add(tracer.kwargs)
    return h.hexdigest()[:32]


class Backend(RemoteBackend):
    """nnsight's remote backend with interplab's errors, quiet unless asked (``verbose``).

    Inside a job (a :class:`Journal` in :data:`JOURNAL`) a request is submitted without blocking,
    its NDIF id written down, and polled until done; a request already in flight is polled by id.
    """

    def __init__(self, model_key: str, host: str, server_nnsight: str | None = None, **kwargs: Any):
        super().__init__(model_key, host=host, api_key=api_key(), **kwargs)
        self.server_nnsight = server_nnsight
        self.display.enabled = bool(kwargs.get("verbose"))

    def __call__(self, tracer: Any = None) -> Any:
        journal = JOURNAL.get()
        try:
            if journal is None or not self.blocking or tracer is None:
                return super().__call__(tracer)
            return self._journaled(tracer, journal)
        except RemoteError as err:
            better = explain(err, self.host, self.server_nnsight)
            if better is not None:
                raise better from None
            raise
        except OSError as err:  # connection refused or reset, DNS
            raise RemoteModelError(
                f"Lost the NDIF server at {self.host} ({type(err).__name__}: {err}). Is it still running?"
            ) from None

    def _journaled(self, tracer: Any, journal: Journal) -> Any:
        key = request_key(tracer, self.model_key)
        self.blocking = False
        self.job_id = journal.pending(key)
        if self.job_id is None:
            self.submit(tracer)
            journal.set(key, self.job_id)
            journal.sent += 1
        else:
            journal.polled_existing += 1
        wait = 0.02
        while (result := self.poll(tracer)) is None:
            time.sleep(wait)
            wait = min(1.0, wait * 1.5)
        journal.set(key, None)
        self._push(result, tracer)
        return result
