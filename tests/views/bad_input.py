"""Bad inputs of heatmap_data and attention_data: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import interplab as ilab
from tests.contracts.rows import Row, T, V

ROWS: list[Row] = [
    Row("ilab.heatmap_data", lambda c: ilab.heatmap_data(["a", "b"], [1.0]), V, r"n_tokens=2; got shape \(1, 1\)"),
    Row("ilab.heatmap_data", lambda c: ilab.heatmap_data([1, 2], [1.0, 2.0]), T, "Tokens must be strings"),
    Row("ilab.heatmap_data", lambda c: ilab.heatmap_data(["a"], [float("nan")]), V, "NaN or inf"),
    Row(
        "ilab.attention_data",
        lambda c: ilab.attention_data(c.model, "the cat", layers=9),
        V,
        r"layer must be an integer in 0\.\.1, got 9",
    ),
    Row(
        "ilab.attention_data",
        lambda c: ilab.attention_data(c.model, "the cat", max_values=3),
        V,
        "over max_values=3: pick fewer layers",
    ),
    Row(
        "ilab.AttentionData.head",
        lambda c: ilab.attention_data(c.model, "the cat", layers=1).head(9, 0),
        V,
        r"Layer 9 is not in this view; it holds layers \[1\]",
    ),
    Row(
        "ilab.HeatmapData.color_scales",
        lambda c: ilab.heatmap_data(["a", "b"], [1.0, 2.0]).color_scales("rainbow"),
        V,
        r"scale='rainbow' is not one of \('auto', 'sequential', 'diverging'\)",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.HeatmapData": "a dataclass built by ilab.heatmap_data (which has rows)",
    "ilab.AttentionData": "a dataclass built by ilab.attention_data (which has rows)",
}
