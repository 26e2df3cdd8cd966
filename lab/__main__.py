"""``python -m lab``: run JupyterLab as ``make lab`` does (see :mod:`lab.command`)."""

import os
import sys

from lab.command import lab_command

command = lab_command(sys.executable) + sys.argv[1:]
os.execv(command[0], command)
