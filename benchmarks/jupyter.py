"""A real Jupyter server and headless Chromium, for the notebook benchmarks and the browser tests.

One home for how they are started (the browser tests import this module): ``jupyter lab`` from
this venv, which also serves Notebook 7's ``/notebooks/`` pages, token off, XSRF off, isolated
config/data/runtime/workspace dirs and HOME under ``base``, serving ``base/root``. The venv's
``share/jupyter`` (kernelspec, labextensions) and ``etc/jupyter`` (server extensions, opprof's
among them) stay on the path through ``sys.prefix``, as for a user who ran ``pip install``.
Debian's chromium through Python playwright (never ``playwright install``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "JupyterServer", "chromium", "free_port", "start_server", "stop_process"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class JupyterServer:
    url: str  # base URL, no trailing slash
    root: Path  # the served directory
    log: Path
    proc: Any
    token: str = ""  # to log in with (``?token=``); "" where none is asked

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.proc, grace_s=20)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: Any, grace_s: float = 10) -> None:
    """Terminate a server by its PID, then kill it if it lingers past ``grace_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def start_server(base: Path, *, extra_env: dict[str, str] | None = None, timeout_s: float = 60, token: str = "") -> JupyterServer:
    """Start the server under ``base`` and wait until it answers; RuntimeError (with its log) if not.

    Without ``token``, no login and no XSRF checks (tests drive the page and its API freely); with
    one, a server as users run it: the token to log in, XSRF checks on every POST from the page."""
    root = base / "root"
    root.mkdir(parents=True, exist_ok=True)
    home = base / "home"
    home.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(base / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(base / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(base / "jupyter-runtime"),
        "JUPYTER_PLATFORM_DIRS": "0",
        "IPYTHONDIR": str(base / "ipython"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        **(extra_env or {}),
    }
    env.pop("JUPYTER_PATH", None)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        "--ServerApp.password=",
        *([] if token else ["--ServerApp.disable_check_xsrf=True"]),
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run commands and read models
        "--JupyterNotebookApp.expose_app_in_browser=True",  # the same in Notebook 7's pages
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    # No "get notified about Jupyter news?" toast over the page.
    settings = base / "jupyter-config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    log = base / "jupyter.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = JupyterServer(f"http://127.0.0.1:{port}", root, log, proc, token)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{server.log_text()}")
        try:
            status = urllib.request.Request(
                f"{server.url}/api/status", headers={"Authorization": f"token {token}"} if token else {}
            )
            with urllib.request.urlopen(status, timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"jupyter lab did not answer in {timeout_s:.0f} s:\n{server.log_text()}")
        time.sleep(0.3)


@contextmanager
def chromium(profile_dir: Path) -> Iterator[Any]:
    """A headless Chromium browser (playwright's ``Browser``); Chromium's own files under ``profile_dir``."""
    from playwright.sync_api import sync_playwright

    # Chromium writes under $HOME/.config and $HOME/.cache even with its own profile dir.
    env = {**os.environ, "XDG_CONFIG_HOME": str(profile_dir / "xdg-config"), "XDG_CACHE_HOME": str(profile_dir / "xdg-cache")}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, env=env, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()
