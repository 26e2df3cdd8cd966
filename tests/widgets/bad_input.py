"""Bad inputs of ilab.widgets and the IPython extension: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

from typing import Any

import torch

import interplab as ilab
from tests.circuits.bad_input import tiny_circuit
from tests.contracts.rows import SITE, Ctx, I, Row, T, V, before_work


def _panel(c: Ctx, vectors: dict[str, Any]) -> Any:
    return ilab.widgets.SteeringPanel(c.model, vectors, site=SITE, autorun=False)


ROWS: list[Row] = [
    Row(
        "ilab.widgets.FeatureHeatmap",
        lambda c: ilab.widgets.FeatureHeatmap(c.acts, "notasae"),
        T,
        "the second argument is an SAE .*got str",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap",
        lambda c: ilab.widgets.FeatureHeatmap(c.acts, features=[]),
        V,
        "features is empty",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap",
        lambda c: ilab.widgets.FeatureHeatmap(c.acts, scale="log"),
        V,
        "scale='log' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap.column",
        lambda c: c.heatmap.column(7),
        V,
        r"feature=7 is not among the features shown: \[0, 1, 2\]",
    ),
    Row(
        "ilab.widgets.TokenHeatmap",
        lambda c: ilab.widgets.TokenHeatmap(["a", "b"], [[1.0], [2.0]]),
        V,
        r"one value per token \(\[n_tokens\]\); got shape \(2, 1\)",
    ),
    Row(
        "ilab.widgets.TokenHeatmap",
        lambda c: setattr(ilab.widgets.TokenHeatmap(["a"], [1.0]), "selected_token", 3),
        Exception,
        r"selected_token=3 is out of range: tokens are 0\.\.0",
    ),
    Row(
        "ilab.widgets.FeatureDashboard",
        lambda c: ilab.widgets.FeatureDashboard([1, 2]),
        T,
        "takes FeatureData or an SAE; got list",
    ),
    Row(
        "ilab.widgets.FeatureDashboard",
        lambda c: ilab.widgets.FeatureDashboard(c.data, sort="size"),
        V,
        "sort='size' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureDashboard",
        lambda c: ilab.widgets.FeatureDashboard(c.data, max_density=0),
        V,
        r"max_density=0 is not a fraction of tokens in \(0, 1\]",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap",
        lambda c: ilab.widgets.FeatureHeatmap(c.acts, c.sae, density=[0.5]),
        V,
        r"density needs one value per latent, shape \(24,\); got \(1,\)",
    ),
    Row("ilab.widgets.FeatureDashboard.set_label", lambda c: c.dashboard.set_label(99, "x"), I, "Latent 99"),
    Row(
        "ilab.widgets.FeatureDashboard.set_explanations",
        lambda c: c.dashboard.set_explanations(["cats"]),
        T,
        "explained must be what ilab.autointerp.explain gives, not list",
    ),
    Row(
        "ilab.widgets.FeatureDashboard.set_label",
        lambda c: c.dashboard.set_label(1, None),
        T,
        "A label is a string, got NoneType",
    ),
    Row(
        "ilab.widgets.FeatureDashboard.link",
        lambda c: c.dashboard.link("heatmap"),
        T,
        r"link\(\) takes a FeatureHeatmap",
    ),
    Row("ilab.widgets.FeatureDashboard.histogram", lambda c: c.dashboard.histogram(99), I, "Latent 99"),
    Row(
        "ilab.widgets.FeatureDashboard.try_text",
        lambda c: c.dashboard.try_text("the cat"),
        RuntimeError,
        "try_text needs the SAE and the model",
    ),
    Row(
        "ilab.widgets.PatchingGrid",
        lambda c: ilab.widgets.PatchingGrid({}),
        T,
        "takes a PatchingResult or a non-empty dict",
    ),
    Row(
        "ilab.widgets.PatchingGrid",
        lambda c: ilab.widgets.PatchingGrid({"a": 1}),
        T,
        r"These entries are not PatchingResult: \['a'\]",
    ),
    Row(
        "ilab.widgets.SteeringPanel",
        lambda c: ilab.widgets.SteeringPanel(c.model, {}),
        V,
        "vectors must be a non-empty dict",
    ),
    Row(
        "ilab.widgets.SteeringPanel",
        lambda c: _panel(c, {"v": torch.ones(5)}),
        V,
        "Vector 'v' has d=5, but .* has width 32",
    ),
    Row(
        "ilab.widgets.SteeringPanel.wait",
        lambda c: _panel(c, {"v": c.vec}).wait(timeout="soon"),
        T,
        "timeout must be a number, got str",
    ),
    Row(
        "ilab.widgets.AttentionPattern",
        lambda c: ilab.widgets.AttentionPattern("x", "the cat"),
        T,
        "AttentionPattern takes a model and a text, or AttentionData; got str",
    ),
    Row(
        "ilab.widgets.AttentionPattern.compare",
        lambda c: ilab.widgets.AttentionPattern.compare("x"),
        T,
        "takes a drift result, or two AttentionData",
    ),
    Row(
        "ilab.widgets.AttentionPattern.set_scale",
        lambda c: ilab.widgets.AttentionPattern(c.model, "the cat", layer=1).set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.LogitLens",
        lambda c: ilab.widgets.LogitLens("x"),
        T,
        "LogitLens takes what ilab.logit_lens or ilab.patchscope returned, a LensView or a model; got str",
    ),
    Row(
        "ilab.widgets.LogitLens",
        lambda c: ilab.widgets.LogitLens(ilab.logit_lens(c.model, "the cat"), token="the cat"),
        V,
        "'the cat' is 2 tokens",
    ),
    Row(
        "ilab.widgets.LogitLens.set_scale",
        lambda c: ilab.widgets.LogitLens(ilab.logit_lens(c.model, "the cat")).set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap.set_scale",
        lambda c: c.heatmap.set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureHeatmap.color_scale",
        lambda c: c.heatmap.color_scale(99),
        V,
        r"feature=99 is not among the features shown: \[0, 1, 2\]",
    ),
    Row(
        "ilab.widgets.PatchingGrid.set_row_text",
        lambda c: ilab.widgets.PatchingGrid(c.result).set_row_text(5),
        T,
        "labels must map latent ids to label strings, got int",
    ),
    Row(
        "ilab.widgets.PatchingGrid.set_row_text",
        lambda c: ilab.widgets.PatchingGrid(c.result).set_row_text({"a": 1}),
        T,
        "these entries do not",
    ),
    Row(
        "ilab.widgets.PatchingGrid.set_scale",
        lambda c: ilab.widgets.PatchingGrid(c.result).set_scale("rainbow"),
        V,
        "scale='rainbow' is not one of",
    ),
    Row(
        "ilab.widgets.PatchingGrid.color_scale",
        lambda c: ilab.widgets.PatchingGrid(c.result).color_scale("nope"),
        V,
        "tab='nope' is not one of",
    ),
    Row(
        "ilab.widgets.FeatureFlow",
        lambda c: ilab.widgets.FeatureFlow([ilab.matching.match(c.sae, c.sae)], 99),
        I,
        r"Latent 99 is out of range: latents are 0\.\.23",
    ),
    Row("ilab.widgets.FeatureFlow", lambda c: ilab.widgets.FeatureFlow(["x"]), T, r"non-empty list of matches"),
    Row(
        "ilab.widgets.Routing",
        before_work(lambda c: ilab.widgets.Routing(c.model, "the cat sat", layer=1)),
        V,
        r"'blocks\.1\.mlp\.hook_router_logits': model_type 'gpt2' has no mixture-of-experts router",
    ),
    Row("ilab.widgets.Routing", lambda c: ilab.widgets.Routing(c.model, "the cat", layer=5), V, r"layer must .*0\.\.1"),
    Row("ilab.widgets.Routing", lambda c: ilab.widgets.Routing(c.model, ["the cat"]), T, r"text must be one non-empty"),
    Row("ilab.widgets.CircuitGraph", lambda c: ilab.widgets.CircuitGraph("g"), T, "shows an ilab.circuits.Graph"),
    Row(
        "ilab.widgets.CircuitGraph.group",
        lambda c: ilab.widgets.CircuitGraph(tiny_circuit()[2]).group("", [0]),
        V,
        "non-empty label",
    ),
    Row(
        "ilab.widgets.CircuitGraph.set_row_text",
        lambda c: ilab.widgets.CircuitGraph(tiny_circuit()[2]).set_row_text([1]),
        T,
        "labels must map latent ids",
    ),
    Row(
        "ilab.widgets.CircuitGraph.show_intervention",
        lambda c: ilab.widgets.CircuitGraph(tiny_circuit()[2]).show_intervention({}),
        T,
        "takes an ilab.circuits.intervene",
    ),
    Row(
        "ilab.widgets.AttentionPattern",
        before_work(lambda c: ilab.widgets.AttentionPattern(c.model, "the cat", layer=99)),
        V,
        r"layer must be an integer in 0\.\.1, got 99",
    ),
    Row(
        "ilab.widgets.AttentionPattern",
        before_work(lambda c: ilab.widgets.AttentionPattern(c.model, "the cat", head=99)),
        V,
        r"head must be an integer in 0\.\.3, got 99",
    ),
    Row(
        "ilab.widgets.FeatureDashboard",
        lambda c: ilab.widgets.FeatureDashboard(c.data, n_cards=-1),
        V,
        "n_cards must be an integer >= 0, got -1",
    ),
    Row(
        "ilab.widgets.SteeringPanel",
        lambda c: ilab.widgets.SteeringPanel(c.model, {"v": c.vec}, seed=2**70, autorun=False),
        V,
        r"seed must be an integer in 0\.\.4294967295, got 1180591620717411303424",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.widgets.CircuitGraph.view_index": "maps a graph node index to the widget's (None when pruned); no work",
    "ilab.load_ipython_extension": "called by IPython's %load_ext with its own shell, never by users",
    "ilab.unload_ipython_extension": "called by IPython's %unload_ext with its own shell, never by users",
}
