"""The notebooks shipped in ``nbs/``, and how the lab saves them.

The shipped notebooks are a fixed list, :data:`SHIPPED`, not every ``nbs/*.ipynb``: a notebook a user
makes there (File > New Notebook gives ``nbs/Untitled.ipynb``) is not run by
``tests/notebooks/test_notebooks.py``, executed by ``make docs`` or measured by ``bench/bench_memory.py``.
A new notebook goes into :data:`SHIPPED` and into ``mkdocs.yml``'s nav (``tests/lab/test_notebooks.py``
fails on a notebook git tracks in ``nbs/`` that is missing here).

:func:`pre_save_hook` is the lab server's (``lab/jupyter_server_config.py``): a shipped notebook is
saved without outputs, execution counts and run-time metadata, with the notebook metadata it has on
disk, so running the tour in ``make lab`` leaves ``git status`` clean. Any other notebook is saved as
it is (File > Save Notebook As... keeps a run of the tour with its outputs).

>>> [p.name for p in shipped_notebooks()][:2]
['00_tour.ipynb', '01_heatmaps.ipynb']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The shipped notebooks of ``nbs/``, in order (file names without ``.ipynb``).
SHIPPED: tuple[str, ...] = (
    "00_tour",
    "01_heatmaps",
    "02_saes",
    "03_feature_dashboards",
    "04_activation_patching",
    "05_steering",
    "06_probes_and_das",
    "06b_knob_and_dictionaries",
    "07_feature_evolution",
    "08_evaluation_suites",
    "08b_latent_memorization",
    "08c_ps_eval_pareto",
    "09_circuits",
    "09b_cross_layer_transcoders",
    "10_autointerp",
    "papers/identifiability",
    "papers/group_proofs",
    "papers/knowledge_edit_and_td",
    "papers/clip_second_order",
    "papers/monosemantic_experts",
    "papers/graph_search",
    "papers/icl_transition",
    "papers/planning_agent",
    "papers/stitching_meta",
    "papers/supervised_dictionaries",
    "papers/transformers_vs_mambas",
)
TOUR = "nbs/00_tour.ipynb"
#: Cell metadata a run or a view of the outputs writes (timings, collapsed or scrolled outputs).
RUN_CELL_METADATA = ("execution", "collapsed", "scrolled")


def shipped_notebooks(root: Path = ROOT) -> list[Path]:
    """The shipped notebooks' paths under ``root``, in order (whether or not they exist there).

    >>> shipped_notebooks()[0] == ROOT / "nbs" / "00_tour.ipynb"
    True
    """
    return [root / "nbs" / f"{name}.ipynb" for name in SHIPPED]


def strip_run(notebook: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
    """Remove, in place, what running ``notebook`` (nbformat 4 JSON) adds: code cells' outputs and execution counts,
    :data:`RUN_CELL_METADATA`; the notebook metadata becomes ``metadata`` when given (else loses widget state).

    >>> nb = {"cells": [{"cell_type": "code", "execution_count": 3, "metadata": {}, "outputs": [{}]}], "metadata": {}}
    >>> strip_run(nb); nb["cells"][0]["outputs"], nb["cells"][0]["execution_count"]
    ([], None)
    """
    for cell in notebook.get("cells", []):
        cell_metadata = cell.get("metadata", {})
        for key in RUN_CELL_METADATA:
            cell_metadata.pop(key, None)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    if metadata is not None:
        notebook["metadata"] = json.loads(json.dumps(metadata))
    else:
        notebook.get("metadata", {}).pop("widgets", None)


def is_shipped(os_path: Path, root: Path = ROOT) -> bool:
    """Whether the file at ``os_path`` is one of the shipped notebooks of the repository at ``root``."""
    target = Path(os_path).resolve()
    return any(target == path.resolve() for path in shipped_notebooks(root))


def pre_save_hook(model: dict[str, Any], path: str, contents_manager: Any, **kwargs: Any) -> None:
    """Jupyter's ``ContentsManager.pre_save_hook``: a shipped notebook is saved as :func:`strip_run` leaves it,
    with the notebook metadata of the file on disk (a kernel adds its version details); others as they are."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    os_path = Path(contents_manager.root_dir) / path.lstrip("/")
    if not is_shipped(os_path):
        return
    try:
        on_disk = json.loads(os_path.read_text(encoding="utf-8")).get("metadata")
    except (OSError, ValueError):
        on_disk = None
    strip_run(model["content"], on_disk)
