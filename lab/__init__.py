"""What ``make lab`` runs: JupyterLab over the repository root, opening the tour.

Not part of the library (``setup.py`` installs ``interplab/``, ``core/`` and ``widgets/`` only):
``command.py`` builds the server's command line (``python -m lab`` runs it), ``jupyter_server_config.py``
is the server's configuration, ``notebooks.py`` names the shipped notebooks and strips their outputs on
save. The browser tests start their server from the same command (``tests/browser/conftest.py``).
"""
