"""What every patching run shares (``core/patching/prepare.py``): metrics bound and checked, bad input refused
before any forward pass, the grid's site kinds mapped onto the site table."""

from __future__ import annotations

import pytest
import torch

import interplab as ilab
from tests.patching.torch_reference import CLEAN, CORRUPT, metric, tiny_sae
from tests.tiny import tiny_model


def test_metrics_values_and_errors():
    m = tiny_model("gpt2")
    p = ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.prob(" Mary"), site="resid_post", positions=[-1])
    probs = torch.softmax(m.logits([CLEAN, CORRUPT])[:, 0], -1)
    mary = m.tokenizer(" Mary", add_special_tokens=False)["input_ids"][0]
    assert p.clean_baseline == pytest.approx(float(probs[0, mary]), rel=1e-5)
    assert p.corrupt_baseline == pytest.approx(float(probs[1, mary]), rel=1e-5)
    kl = ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.kl_to_clean(), site="resid_post", positions=[-1])
    assert kl.clean_baseline == pytest.approx(0.0, abs=1e-6) and kl.corrupt_baseline > 0
    assert kl.values[-1, 0] == pytest.approx(0.0, abs=1e-5)
    custom = ilab.patching.grid(m, CLEAN, CORRUPT, lambda logits: logits[:, mary], site="resid_post", positions=[-1])
    assert custom.corrupt_baseline == pytest.approx(float(m.logits(CORRUPT)[0, 0, mary]), abs=1e-5)
    with_pair = ilab.patching.grid(m, CLEAN, CORRUPT, lambda logits, pair: logits[:, mary] + pair, positions=[-1])
    assert with_pair.corrupt_baseline == pytest.approx(custom.corrupt_baseline, abs=1e-5)
    with pytest.raises(ValueError, match="one value per row"):
        ilab.patching.grid(m, CLEAN, CORRUPT, lambda logits: logits[:, :2], positions=[-1])
    with pytest.raises(ValueError, match="not one"):
        ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.logit_diff(" Mary John", " John"))
    with pytest.raises(ValueError, match="2 answers for 1 prompt pairs"):
        ilab.patching.grid(m, CLEAN, CORRUPT, ilab.patching.logit_diff([" Mary", " John"], " John"))
    with pytest.raises(TypeError, match="metric must be"):
        ilab.patching.grid(m, CLEAN, CORRUPT, 3)


def test_bad_inputs_fail_before_work():
    m = tiny_model("gpt2")
    with pytest.raises(ValueError, match=r"same number of tokens.*\['<bos>', 'Mary'"):
        ilab.patching.grid(m, CLEAN, "Mary went to the store", metric())
    with pytest.raises(ValueError, match="site='resid_mid' is not one of"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), site="resid_mid")
    with pytest.raises(ValueError, match="direction='up' is not one of"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), direction="up")
    with pytest.raises(ValueError, match="Position 40 is outside"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), positions=[40])
    with pytest.raises(ValueError, match="batch_size"):
        ilab.patching.grid(m, CLEAN, CORRUPT, metric(), batch_size=0)
    with pytest.raises(ValueError, match="same number of tokens; got lengths"):
        ilab.patching.grid(m, [CLEAN, "the cat sat"], [CORRUPT, "the dog sat"], metric())
    with pytest.raises(ValueError, match="sites"):
        ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), sites=["resid", "heads"])
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match=r"steps must be an integer in 1\.\.1024, got"):
            ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), steps=bad)
    with pytest.raises(ValueError, match=r"steps must be an integer in 1\.\.1024, got -1"):
        ilab.patching.latents(m, tiny_sae(m), CLEAN, CORRUPT, metric(), steps=-1)
    with pytest.raises(ValueError, match="path='layer' is not one of"):
        ilab.patching.attribution(m, CLEAN, CORRUPT, metric(), steps=2, path="layer")


def test_grid_site_kinds_come_from_the_site_table():
    """Patching restates no site table: its kinds map onto interplab.core.model.sites.KINDS."""
    from interplab.core.model.sites import KINDS
    from interplab.core.patching.prepare import ORDER, SITE_KIND, SITES, site_target

    assert [SITE_KIND.get(k, k) for k in ORDER] == list(KINDS) and set(SITES) <= set(ORDER)
    model = tiny_model("llama")
    for kind in SITES:
        envoy, io = site_target(model, kind, 1)
        name = f"blocks.1.{'attn.hook_z' if kind == 'heads' else 'hook_' + kind}"
        assert (envoy, io) == model.envoy(name)
