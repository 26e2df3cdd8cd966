"""DAS on tiny models: the intervention against a brute-force forward hook, training, results, files, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from interplab.core.das.intervene import prepare, run
from interplab.core.model.trace_ops import interchange, orthonormal

import interplab as ilab
from tests.faults import kill_at_every_step
from tests.tiny import no_forward, tiny_model

SITE = "blocks.0.hook_resid_post"
BASE = ["the cat sat on the mat", "the dog ran to the house", "Mary gave a drink to John", "a big red bird sat",
        "the quick fox jumps over", "the lazy dog sat on", "John went to the store", "a small green tree"]  # fmt: skip
SOURCE = ["the dog sat on the mat", "the cat ran to", "John gave a drink to Mary", "a small blue bird sat",
          "the slow fox jumps over", "the happy cat sat on", "Mary went to the store", "a big red tree"]  # fmt: skip


def pairs_for(model, base=BASE, source=SOURCE):
    """Labels: the source's own top token (a full swap at the last layer then always succeeds)."""
    n = len(model.tokenizer)  # the tiny vocabulary's named tokens (the embedding has a few more rows)
    labels = [int(model.logits(s)[0, -1, :n].argmax()) for s in source]
    base_labels = [int(model.logits(b)[0, -1, :n].argmax()) for b in base]
    return ilab.das.counterfactual_pairs(model, base, source, labels, base_labels)


def block_module(hf, family: str, layer: int) -> torch.nn.Module:
    return hf.transformer.h[layer] if family == "gpt2" else hf.model.layers[layer]


def brute_force(model, family, texts_base, texts_source, layer, Q_DK):
    """Plain HF forwards with torch hooks: the block's output at each prompt's last token gets the swap."""
    hf = model.module
    mod = block_module(hf, family, layer)
    out = []
    for b, s in zip(texts_base, texts_source, strict=True):
        seen: dict[str, torch.Tensor] = {}

        def keep(_m, _i, o, seen=seen):
            seen["x"] = (o[0] if isinstance(o, tuple) else o)[0, -1].detach().clone()

        def swap(_m, _i, o, seen=seen):
            x = o[0] if isinstance(o, tuple) else o
            x = x.clone()
            x[0, -1] = x[0, -1] + ((seen["x"] - x[0, -1]) @ Q_DK) @ Q_DK.T
            return (x, *o[1:]) if isinstance(o, tuple) else x

        for text, hook in ((s, keep), (b, swap)):
            handle = mod.register_forward_hook(hook)
            try:
                with torch.no_grad():
                    logits = hf(**model.to_tokens(text)).logits
            finally:
                handle.remove()
        out.append(logits[0, -1])
    return torch.stack(out)


@pytest.mark.parametrize("family", ["gpt2", "gemma3"])
def test_intervention_equals_a_brute_force_hook(family):
    model = tiny_model(family)
    pairs = pairs_for(model)
    Q = orthonormal(torch.randn(model.d_model, 3, generator=torch.Generator().manual_seed(0)))
    prep = prepare(model, pairs, SITE, [-1])
    with torch.no_grad():
        ours = run(model, prep, torch.arange(len(pairs)), Q)  # prompts of different lengths, padded in a batch
    ref = brute_force(model, family, pairs.base, pairs.source, 0, Q)
    torch.testing.assert_close(ours, ref.float(), rtol=1e-4, atol=1e-4)


def test_interchange_maths():
    base, source = torch.randn(5, 8), torch.randn(5, 8)
    Q = orthonormal(torch.randn(8, 2))
    out = interchange(base, source, Q)
    torch.testing.assert_close(out @ Q, source @ Q)  # the subspace's coordinates come from the source
    P = torch.eye(8) - Q @ Q.T
    torch.testing.assert_close(out @ P, base @ P)  # the rest from the base
    torch.testing.assert_close(interchange(base, source, orthonormal(torch.randn(8, 8))), source)


def test_fit_learns_a_direction_and_reports_iia(tmp_path):
    model = tiny_model("gpt2")
    pairs = pairs_for(model) + pairs_for(model, SOURCE, BASE)
    das = ilab.das.fit(model, pairs, "blocks.1.hook_resid_post", k=1, epochs=8, lr=0.05, batch_size=4, progress=False)
    # At the last layer's output a full swap hands over the source's answer: the ceiling is 1.
    assert das.full_iia == 1.0
    assert sum(das.losses[-3:]) < sum(das.losses[:3])  # an epoch is 3 steps
    assert das.direction.shape == (model.d_model,) and das.direction.norm() == pytest.approx(1.0, abs=1e-5)
    assert 0 <= das.iia <= 1 and "IIA" in repr(das)
    vec = ilab.steering.from_probe(das)
    assert vec.site == das.site and vec.provenance["source"] == "DASResult"
    back = ilab.das.DASResult.load(das.save(tmp_path / "das.safetensors"))
    assert torch.equal(back.Q_DK, das.Q_DK) and back.iia == das.iia and back.positions == das.positions
    assert "DAS" in str(das.chart().to_dict())
    wide = ilab.das.fit(model, pairs, "blocks.1.hook_resid_post", k=model.d_model, epochs=1, progress=False)
    assert wide.iia == wide.full_iia  # the whole space is a full swap
    with pytest.raises(ValueError, match="k=32 dimensions; a direction needs k=1"):
        _ = wide.direction


def test_patching_pairs_convert():
    model = tiny_model("gpt2")
    pp = ilab.patching.prompt_pairs(model, ["the cat sat"], ["the dog sat"], ["on"], ["to"])
    cp = ilab.das.as_pairs(model, pp)
    assert cp.base == ["the dog sat"] and cp.source == ["the cat sat"] and cp.labels == ["on"]


def test_fit_resumes_after_a_kill_to_the_same_subspace(tmp_path):
    model = tiny_model("gpt2")
    pairs = pairs_for(model)
    kw = dict(k=2, epochs=2, lr=0.05, batch_size=3, test_size=0.25, progress=False, checkpoint_every=1)
    whole = ilab.das.fit(model, pairs, SITE, **kw)

    def job(path):
        return ilab.das.fit(model, pairs, SITE, path=path, **kw)

    def check(result, path):
        torch.testing.assert_close(result.Q_DK, whole.Q_DK, rtol=0, atol=1e-6)
        assert result.losses == pytest.approx(whole.losses, rel=1e-6)

    assert kill_at_every_step(job, check, tmp_path) > 0
    with pytest.raises(ValueError, match="lr"):
        ilab.das.fit(model, pairs, SITE, path=tmp_path / "uninterrupted", **{**kw, "lr": 0.5})


def test_bad_input_is_refused_before_any_forward_pass():
    model = tiny_model("gpt2")
    pairs = ilab.das.counterfactual_pairs(model, BASE[:4], SOURCE[:4], ["on"] * 4)
    with no_forward(model):
        with pytest.raises(ValueError, match="Got 4 base prompts but 3 source prompts"):
            ilab.das.counterfactual_pairs(model, BASE[:4], SOURCE[:3], ["on"] * 4)
        with pytest.raises(ValueError, match="Got 4 base prompts but 2 labels"):
            ilab.das.counterfactual_pairs(model, BASE[:4], SOURCE[:4], ["on"] * 2)
        with pytest.raises(ValueError, match=r"k=33 is larger than the width of blocks.0.hook_resid_post \(d=32\)"):
            ilab.das.fit(model, pairs, SITE, k=33)
        with pytest.raises(ValueError, match="k must be"):
            ilab.das.fit(model, pairs, SITE, k=0)
        with pytest.raises(ValueError, match="Position 9 is outside"):
            ilab.das.fit(model, pairs, SITE, positions=9)
        with pytest.raises(ValueError, match="Unknown site"):
            ilab.das.fit(model, pairs, "blocks.7.hook_resid_post")
        with pytest.raises(TypeError, match="pairs must be CounterfactualPairs"):
            ilab.das.fit(model, [("a", "b")], SITE)
        with pytest.raises(ValueError, match="kind='heads' is not one of"):
            ilab.das.layer_search(model, pairs, kind="heads")
        with pytest.raises(ValueError, match="init must be a finite"):
            ilab.das.fit(model, pairs, SITE, init=torch.zeros(3, 1))


def test_layer_search_scores_every_layer_and_fits_the_top_ones():
    model = tiny_model("gpt2")
    pairs = pairs_for(model) + pairs_for(model, SOURCE, BASE)
    search = ilab.das.layer_search(model, pairs, top=1, epochs=2, lr=0.05, batch_size=4, progress=False)
    assert list(search.layers) == [0, 1] and search.kind == "resid_post"
    # The last layer's output at the last token is the whole answer: a full swap there always succeeds.
    assert search.score[1] == 1.0
    fitted = [int(x) for x, v in zip(search.layers, search.iia, strict=True) if v == v]
    top = int(search.layers[int(np.argmax(search.score))])  # the earliest of the highest scores
    assert fitted == [top] and search.best_layer == top  # top=1: DAS only where the cheap score is highest
    assert search.best.site == f"blocks.{top}.hook_resid_post" and search.best.iia == search.iia[top]
    # The cheap score is the full swap's IIA, which a fit at that layer reports too.
    assert search.best.full_iia == search.score[top]
    df = search.to_pandas()
    assert list(df.columns) == ["layer", "full_swap", "das_iia"] and len(df) == 2
    assert "layer search" in str(search.chart().to_dict())


def test_knob_task_and_sweep_on_a_tiny_model():
    model = tiny_model("gpt2")
    task = ilab.das.KnobTask([("cat", "dog", "bird"), ("fox", "tree", "house"), ("Mary", "John", "dog")])
    assert task.answers("context") == [" bird", " house", " dog"] and task.answers("prior")[0] == " dog"
    assert "Use the context." in task.prompt(0, "context") and "what you know" in task.prompt(0, "prior")
    pairs = task.pairs()
    assert len(pairs) == 6 and pairs.labels[:3] == task.answers("prior") and pairs.base_labels[:3] == task.answers(
        "context")  # fmt: skip
    acc = task.accuracy(model)
    diffs = task.logit_diffs(model, task.prompts("context"))
    assert acc["context"] == float((diffs > 0).float().mean())
    das = ilab.das.fit(model, pairs, "blocks.0.hook_resid_post", k=1, epochs=1, batch_size=2, progress=False)
    sweep = ilab.das.knob_sweep(model, das, task, scales=[-5, 0, 5])
    assert sweep.context[1] == pytest.approx(float(diffs.mean()), abs=1e-5)  # scale 0 is the plain model
    assert abs(sweep.context[2] - sweep.context[0]) > 1e-4  # moving along the direction moves the answer
    assert "knob" in str(sweep.chart().to_dict()) and len(sweep.to_pandas()) == 3


@pytest.mark.parametrize(("change", "q", "match"), [
    ({}, torch.full((8, 1), float("nan")), r"Q_DK holds nan at \[0, 0\]: must be finite"),
    ({"positions": [10**30]}, None, r"positions holds 1000000000000000019884624838656 at \[0\]: must be in "),
    ({"positions": [-1, -1]}, None, r"positions repeats an index"),
    ({"losses": [1.0, float("nan")]}, None, r"losses holds nan at \[1\]"),
])  # fmt: skip
def test_a_crafted_das_file_is_refused_naming_its_field(tmp_path, change, q, match):
    from interplab.core.das.fit import DASResult
    from interplab.core.storage.readers import FileError
    from safetensors import safe_open
    from safetensors.torch import save_file

    das = DASResult("blocks.1.hook_resid_post", [-1], torch.eye(8)[:, :1], 0.5, 0.5, 1.0, 0.1, 0.2, [1.0, 0.5], {})
    file = das.save(tmp_path / "das.safetensors")
    assert DASResult.load(file).positions == [-1]
    with safe_open(str(file), framework="pt") as f:
        meta = f.metadata()
    info = {**json.loads(meta["interplab"]), **change}
    q_dk = (das.Q_DK if q is None else q).contiguous()
    save_file({"Q_DK": q_dk}, str(file), metadata={**meta, "interplab": json.dumps(info)})
    with pytest.raises(FileError, match=match):
        DASResult.load(file)


def test_a_training_step_runs_with_the_weights_frozen_and_restores_them():
    # The rotation's gradient needs no weight gradient: with the weights requiring grad the backward would save
    # each layer's input for them (0.2 GB more at the peak of a DAS step on the embedded model).
    model = tiny_model("gpt2")
    pairs = pairs_for(model)
    prep = prepare(model, pairs, SITE, [-1])
    seen = []
    layer = model.module.transformer.h[1].mlp.c_fc
    handle = layer.register_forward_hook(lambda mod, args, out: seen.append(mod.weight.requires_grad))
    A_DK = torch.randn(model.d_model, 1).requires_grad_(True)
    try:
        _, grad_DK, _ = run(model, prep, torch.arange(4), None, A_DK)
    finally:
        handle.remove()
    assert seen == [False] and grad_DK.shape == A_DK.shape and grad_DK.abs().sum() > 0
    assert all(p.requires_grad for p in model.module.parameters())  # as they were
