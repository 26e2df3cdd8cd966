"""The command line of ``make lab``: JupyterLab serving the repository root and opening the tour.

``python -m lab`` (what ``make lab`` runs) replaces itself with :func:`lab_command`; the browser tests
(``tests/browser/conftest.py``) start their server from it too, adding their port and token.

>>> lab_command("python", uid=0)[-1]
'--allow-root'
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CONFIG = Path(__file__).resolve().with_name("jupyter_server_config.py")


def lab_command(python: str = sys.executable, uid: int | None = None) -> list[str]:
    """JupyterLab with the lab's server config (``lab/jupyter_server_config.py``) on 127.0.0.1.

    ``--allow-root`` only for ``uid`` 0 (default: this process's effective user id): Jupyter refuses to start
    as root without it (a container, a cloud notebook), and a user does not need it. The ``--config`` file
    takes the place of ``jupyter_server_config.py`` from Jupyter's config folders for this server. ``-P`` keeps the
    repository root off the server's import path, where ``interplab/`` would shadow the installed package.
    """
    uid = os.geteuid() if uid is None else uid
    command = [python, "-P", "-m", "jupyterlab", f"--config={CONFIG}", "--ip=127.0.0.1"]
    if uid == 0:
        command.append("--allow-root")
    return command
