"""The claim cell of nbs/papers/supervised_dictionaries.ipynb fails with a random dictionary in place of the
supervised one (the same mean, values and feature norms), on the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import interplab as ilab

NOTEBOOK = Path(__file__).resolve().parents[2] / "nbs" / "papers" / "supervised_dictionaries.ipynb"


def claim_cell(tag: str) -> str:
    """The source of the notebook's code cell tagged ``tag``."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    found = [c for c in cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(found) == 1, f"{NOTEBOOK.name} has {len(found)} cells tagged {tag!r}"
    return "".join(found[0]["source"])


@pytest.mark.embedded
def test_notebook_dictionary_claims_fail_with_a_random_dictionary(embedded):
    site = "blocks.12.hook_resid_post"
    pairs = ilab.patching.ioi_balanced(embedded, seed=0)  # the notebook's prompts and split
    fit, held = ilab.das.split_ioi(pairs, held_out=0.15, seed=0)
    stand_in = ilab.das.supervised_dictionary(embedded, fit, site).randomized(seed=2)
    ns = {"ilab": ilab, "pd": pd, "model": embedded, "fit": fit, "held": held, "SITE": site, "sup": stand_in}
    with pytest.raises(AssertionError):
        exec(claim_cell("claims-dictionaries"), ns)
    assert not ns["holds"](ns["mine"])
    assert ns["mine"]["sufficiency"] < 0.9 or ns["mine"]["io edits k=2"] < 0.8
