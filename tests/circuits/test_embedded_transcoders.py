"""The transcoders shipped for the embedded Gemma 3 270M: one per layer, small enough to commit, and as good
on held-out text as their README's quality table says (floors measured when they were trained)."""

from __future__ import annotations

import math
import re

import pytest
from interplab.core.circuits import embedded_transcoders, transcoder_quality
from interplab.core.data.corpus import default_corpus
from interplab.core.saes.pretrained import transcoders_folder

#: Floors under the explained variance of hook_mlp_out, measured on these two held-out passages on 2026-11-30
#: (every layer 0.33 .. 0.98, mean 0.64; the README's table: 0.41 .. 0.99 on four others) for transcoders
#: trained on 131,072 tokens; loading them wrongly falls below them (an earlier, barely trained set reached a
#: mean of 0.18, and with its skips zeroed 0.04; every layer given its neighbour's transcoder: -1.15).
EV_FLOOR = 0.2
EV_MEAN_FLOOR = 0.5
CE_BOUND = 20.0  # the replacement model's next-token loss (every MLP replaced at once): 10.7 measured; real: 4.05


def test_every_layer_has_a_small_transcoder_with_a_quality_table():
    folder = transcoders_folder()
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 40e6  # the repository's budget: tests/circuits/test_embedded_clt.py
    readme = (folder / "README.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (-?[\d.]+) \| ([\d.]+) \|$", readme, flags=re.M)
    assert [int(r[0]) for r in rows] == list(range(18))
    assert all(float(r[1]) > EV_FLOOR for r in rows)


@pytest.mark.embedded
def test_embedded_transcoders_replace_the_mlps_on_held_out_text(embedded):
    tcs = embedded_transcoders()
    assert [tc.site for tc in tcs] == [f"blocks.{i}.hook_mlp_in" for i in range(18)]
    assert [tc.site_out for tc in tcs] == [f"blocks.{i}.hook_mlp_out" for i in range(18)]
    texts = [d[:300].rsplit(" ", 1)[0] for d in default_corpus()[-2:]]  # held out: never trained on
    table = transcoder_quality(embedded, tcs, texts, progress=False)
    evs = [row["explained_variance"] for row in table["layers"]]
    assert all(ev > EV_FLOOR for ev in evs) and sum(evs) / len(evs) > EV_MEAN_FLOOR, evs
    assert all(0 < row["l0"] < tcs[0].d_sae for row in table["layers"])
    assert math.isfinite(table["ce_replacement"]) and table["ce_clean"] < table["ce_replacement"] < CE_BOUND
