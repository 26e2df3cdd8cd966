"""Scale and layer sweeps (``core/steering/sweeps.py``): metric, KL and loss per scale, the best layer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.steering.common import S, vector
from tests.tiny import TEXTS, tiny_model


def test_sweep_records_metric_kl_and_loss():
    model = tiny_model("gemma3")
    vec = vector(model, "blocks.1.hook_resid_pre", scale=1.0)
    metric = S.logit_diff({"cat", "dog"}, "bird").on(model)  # a set: the mean logit of its tokens
    res = S.sweep(model, vec, [-2, -1, 0, 1, 2], metric, neutral_texts=TEXTS, prompts=TEXTS[:2])
    zero = list(res.scales).index(0)
    assert res.kl[zero] == 0.0 and res.loss[zero] == pytest.approx(res.baseline_loss, abs=1e-6)
    assert (res.kl[np.arange(5) != zero] > 0).all()
    clean = metric.score(model.logits(TEXTS[:2])[:, -1])
    assert res.metric[zero] == pytest.approx(clean, abs=1e-5)
    assert 0.0 <= res.r2 <= 1.0 and res.metric_name == "logit_diff"
    df = res.to_pandas()
    assert list(df.columns) == ["scale", "logit_diff", "kl", "loss"] and len(df) == 5
    spec = res.chart().to_dict()
    assert "hconcat" in spec
    # a metric on the steering itself (no prompts): it sees each (vector, scale) pair
    res2 = S.sweep(model, vec, [0, 1, 3], lambda steer: steer[1] * 2 + 1, neutral_texts=TEXTS[0])
    assert res2.r2 == pytest.approx(1.0) and res2.slope == pytest.approx(2.0)


def test_layer_sweep(model):
    metric = S.logit_diff("happy", "sad")
    res = S.layer_sweep(model, ["the happy cat"], ["the sad cat"], metric, prompts=["the cat"],
                        neutral_texts=TEXTS[:1], scale=2.0)  # fmt: skip
    assert list(res.layers) == [0, 1] and len(res.effect) == 2 and res.best_layer in (0, 1)
    assert [v.site for v in res.vectors] == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert (res.kl >= 0).all() and "layer" in res.to_pandas().columns
    with pytest.raises(ValueError, match="Unknown site"):
        S.layer_sweep(model, ["a"], ["b"], metric, ["the"], ["the"], layers=[5])


def test_layer_sweep_takes_the_short_site_form_and_the_hook_suffix(gpt2):
    metric = S.logit_diff("happy", "sad")
    args = (gpt2, ["the happy cat"], ["the sad cat"], metric, ["the cat"], TEXTS[:1])
    short = S.layer_sweep(*args, site_kind="mlp_out", scale=2.0)
    suffix = S.layer_sweep(*args, site_kind="hook_mlp_out", scale=2.0)  # the control: the hook name's suffix
    assert [v.site for v in short.vectors] == ["blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"]
    assert short.site_kind == suffix.site_kind == "mlp_out"
    np.testing.assert_allclose(short.effect, suffix.effect)
    with pytest.raises(ValueError, match=r"Unknown site 'mlp'\. Did you mean mlp_in, mlp_out\?.*: embed, resid_pre"):
        S.layer_sweep(*args, site_kind="mlp")
