"""The JupyterLab server of ``make lab`` (``lab/command.py`` passes it with ``--config``).

It serves the repository root (README.md and ARCHITECTURE.md in the file browser, the notebooks in
``nbs/``), its printed URL opens the tour, and a shipped notebook is saved without outputs
(``lab/notebooks.py``). Loaded by path (Jupyter executes it with ``c`` and ``__file__`` defined), so
``notebooks.py`` is too.
"""

import importlib.util
import warnings
from pathlib import Path

c = get_config()  # noqa: F821 (Jupyter defines it)

_spec = importlib.util.spec_from_file_location("interplab_lab_notebooks", Path(__file__).with_name("notebooks.py"))
assert _spec is not None and _spec.loader is not None
notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notebooks)

c.ServerApp.root_dir = str(notebooks.ROOT)
c.LabApp.default_url = f"/lab/tree/{notebooks.TOUR}"
c.ContentsManager.pre_save_hook = notebooks.pre_save_hook
# The server applies its config to the contents manager twice; the second time warns that the hook replaces itself.
warnings.filterwarnings(
    "ignore", r"Overriding existing pre_save_hook \(pre_save_hook\) with a new one \(pre_save_hook\)"
)
