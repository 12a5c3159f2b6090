"""A Ray session for one search: connect to a cluster, or start a local instance bound to
127.0.0.1 with a private temp dir and a token held in memory; everything undone afterwards."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import ray

from tune_batch.backends.ray.cleanup import OWNER, sweep_stale
from tune_batch.backends.signals import stops_as_ctrl_c
from tune_batch.errors import UserError

AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


def _reload_auth() -> None:
    """Make Ray re-read RAY_AUTH_MODE / RAY_AUTH_TOKEN: it caches them per process (pinned
    Ray internals; without this a second search in one process presents a stale token)."""
    try:
        from ray._raylet import AuthenticationTokenLoader
        from ray._raylet import Config as RayletConfig

        RayletConfig.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # another Ray version: it reads the env at start
        pass


@contextlib.contextmanager
def _token_auth(local: bool) -> Iterator[None]:
    """A local instance gets token auth with a per-run token held in memory (nothing written
    to ~/.ray), unless the user set auth themselves; the variables are restored afterwards."""
    saved = {k: os.environ.get(k) for k in AUTH_ENV}
    if local and all(v is None for v in saved.values()):
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        _reload_auth()
    try:
        yield
    finally:
        if any(os.environ.get(k) != v for k, v in saved.items()):
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _reload_auth()


def node_cpus() -> float:
    """The CPUs of the largest live node."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return max((n.get("Resources", {}).get("CPU", 0) for n in nodes), default=1.0) or 1.0


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def _loopback(local: bool) -> Iterator[None]:
    """A local instance on loopback only. Ray replaces a node address of 127.0.0.1 by the
    machine's LAN address unless clusters are off (``ray_constants.ENABLE_RAY_CLUSTER``, read
    from this variable when each Ray process imports it); with them off, every Ray process
    resolves its node address to 127.0.0.1 and binds its servers there (pinned Ray internals:
    tests check the listeners with ``ss``). The driver's copy and the variable are put back."""
    if not local:
        yield
        return
    from ray._private import ray_constants

    saved_env, saved_flag = os.environ.get(LOOPBACK_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = saved_env


def _init(kwargs: dict[str, Any], attempts: int = 3, pause_s: float = 2.0) -> None:
    """ray.init; over Ray Client up to ``attempts`` times, ``pause_s`` apart, after "Initialization
    failure from server" (its proxy sometimes fails to start the session's server on a first
    connection, twice running on a loaded 2-core machine; seen with Ray 2.60)."""
    for attempt in range(attempts):
        try:
            ray.init(**kwargs)
            return
        except ConnectionError as e:
            retry = str(kwargs.get("address", "")).startswith("ray://") and "Initialization failure" in str(e)
            if not retry or attempt == attempts - 1:
                raise
            time.sleep(pause_s)


def _reason(e: BaseException) -> str:
    """One line for a connection error: its first line, and its last (the cause, where Ray Client
    put the server's traceback between them)."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()] or [type(e).__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


@contextlib.contextmanager
def ray_session(address: str | None, *, verbose: bool = False) -> Iterator[dict[str, float]]:
    """Connect to ``address`` or start a local Ray instance bound to 127.0.0.1 with its temp
    dir under a short private path; shut down (and remove that path) afterwards. Yields the
    cluster's resources. A caller already connected (notebook, test) keeps its connection."""
    if ray.is_initialized():
        yield dict(ray.cluster_resources())
        return
    kwargs: dict[str, Any] = {"logging_level": logging.INFO if verbose else logging.WARNING,
                              "log_to_driver": verbose, "include_dashboard": False}
    # user `pkg.module:function` entries must import in the trial processes too
    env_path = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": env_path}}
    temp = None
    if address:
        kwargs["address"] = address
    else:  # socket paths have a length limit: keep the temp dir short
        root = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
        for stale in sweep_stale(root):
            logging.getLogger("tune_batch").info("removed %s, left by a search that was killed", stale)
        temp = tempfile.mkdtemp(prefix="tb-", dir=root)
        with open(os.path.join(temp, OWNER), "w", encoding="ascii") as f:
            f.write(str(os.getpid()))
        # address "local": a new instance here even where RAY_ADDRESS names a cluster (ray.init would
        # connect there, and refuse num_cpus)
        kwargs.update(address="local", _temp_dir=temp, num_cpus=os.cpu_count(), dashboard_host="127.0.0.1",
                      _node_ip_address="127.0.0.1")
    try:
        with _token_auth(local=not address), _loopback(local=not address):
            try:
                _init(kwargs)
            except ConnectionError as e:
                raise UserError(f"--address {address!r}: cannot connect to a Ray cluster there "
                                f"({_reason(e)})") from e
            try:
                with stops_as_ctrl_c():  # ray.init set its own (sys.exit): a SIGTERM stops Tune like Ctrl-C
                    yield dict(ray.cluster_resources())
            finally:
                ray.shutdown()
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


def _reads(path: str, token: str) -> bool:
    try:
        with open(path, encoding="ascii") as f:
            return f.read() == token
    except OSError:
        return False


def check_client_run_dir(address: str | None, run_dir: str) -> None:
    """Over Ray Client (``ray://``) Ray Tune runs its driver as an actor on the cluster's head
    node, so the records are written there. Refuse, in one line, unless the head node sees this
    run directory (the same machine, or a shared filesystem): a token written here is read there."""
    if not (address or "").startswith("ray://"):
        return
    import secrets

    from ray.air.util.node import _force_on_current_node

    token, path = secrets.token_hex(8), os.path.join(run_dir, ".client-check")
    with open(path, "w", encoding="ascii") as f:
        f.write(token)
    try:
        probe = _force_on_current_node(ray.remote(num_cpus=0)(_reads))
        seen = ray.get(probe.remote(path, token), timeout=60)
    finally:
        os.unlink(path)
    if not seen:
        raise UserError(f"--address {address!r}: over Ray Client, Ray Tune runs the search's driver on the cluster's "
                        f"head node, which cannot see {run_dir}; run tune-batch on a cluster node with --address auto "
                        f"(or give --output a directory on a filesystem the head node shares)")

