"""correlate(): per-token signals against brute force, bad signals before any forward pass, the causal check."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interplab.core.evals.correlation import correlate

import interplab as ilab
from tests.tiny import TEXTS, tiny_hf_model, tiny_tokenizer

SITE = "blocks.0.hook_resid_post"


def _setup() -> tuple[torch.nn.Module, object, ilab.Model, ilab.SAE]:
    hf, tok = tiny_hf_model("gpt2"), tiny_tokenizer()
    sae = ilab.SAE.create("standard", d_in=32, d_sae=40, site=SITE)
    return hf, tok, ilab.load_model(hf, tokenizer=tok), sae


def test_surprisal_and_position_correlations_match_brute_force() -> None:
    hf, tok, model, sae = _setup()
    Z, surprisal, position = [], [], []
    for text in TEXTS:  # reference: one text at a time, the HF model's own log-softmax, scipy's pearsonr
        ids = tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = hf(ids, output_hidden_states=True)
        Z.append(sae.encode(out.hidden_states[1][0, 1:]).detach().numpy())
        logp = torch.log_softmax(out.logits[0].float(), -1)
        surprisal += [-float(logp[t - 1, ids[0, t]]) for t in range(1, ids.shape[1])]
        position += list(range(1, ids.shape[1]))
    Z = np.concatenate(Z)
    from scipy.stats import pearsonr

    for signal, values in (("surprisal", surprisal), ("position", position)):
        result = correlate(sae, model, TEXTS, signal, batch_size=2)
        assert result.n_tokens == len(values) == 29
        for row in result.top(5).itertuples():
            ref = pearsonr(Z[:, int(row.latent)], values)
            assert row.r == pytest.approx(ref.statistic, abs=1e-4)
            ci = ref.confidence_interval(0.95)
            assert (row.low, row.high) == pytest.approx((ci.low, ci.high), abs=2e-3)
        assert abs(result.latents.r.iloc[0]) >= abs(result.latents.r.iloc[-1])
    user = [np.asarray(position[:6]) * 2.0, np.asarray(position[6:20]) * 2.0, np.asarray(position[20:]) * 2.0]
    by_array = correlate(sae, model, TEXTS, user)
    by_name = correlate(sae, model, TEXTS, "position")
    assert np.allclose(by_array.latents.r, by_name.latents.r)


def test_bad_signal_fails_before_any_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, model, sae = _setup()
    monkeypatch.setattr(type(model), "run_sites", lambda *a, **k: pytest.fail("a forward pass ran"))
    with pytest.raises(ValueError, match=r"signal\[1\] has 3 values, but text 1 has 14 tokens"):
        correlate(sae, model, TEXTS, [np.zeros(6), np.zeros(3), np.zeros(9)])
    with pytest.raises(ValueError, match=r"'entropy' is not one of \['surprisal', 'position'\]"):
        correlate(sae, model, TEXTS, "entropy")
    with pytest.raises(ValueError, match=r"one array per text \(3\), got 2"):
        correlate(sae, model, TEXTS, [np.zeros(6), np.zeros(14)])


def test_causal_check_against_a_torch_hook() -> None:
    hf, tok, model, sae = _setup()
    result = correlate(sae, model, TEXTS, "surprisal")
    causal = result.causal_check(sae, model, TEXTS, n_latents=3, n_random=2)
    top = causal.latents[0]
    # reference: a forward hook on the HF block subtracting the latents' decoder contributions after BOS
    W = sae.W_dec.detach()[top]

    def hook(module, args, output):
        h = output[0] if isinstance(output, tuple) else output
        h = h.clone()
        h[:, 1:] = h[:, 1:] - sae.encode(h[:, 1:])[..., top] @ W
        return (h, *output[1:]) if isinstance(output, tuple) else h

    diffs = []
    for text in TEXTS:
        ids = tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            clean = torch.log_softmax(hf(ids).logits[0], -1)
            handle = hf.transformer.h[0].register_forward_hook(hook)
            try:
                ablated = torch.log_softmax(hf(ids).logits[0], -1)
            finally:
                handle.remove()
        for t in range(1, ids.shape[1]):
            diffs.append(float(clean[t - 1, ids[0, t]] - ablated[t - 1, ids[0, t]]))
    assert causal.mean_change[0] == pytest.approx(np.mean(diffs), abs=1e-5)
    assert abs(np.mean(diffs)) > 1e-6
    assert len(causal.latents[1]) == 2 and not set(causal.latents[1]) & set(top)
    assert {"mean_change"} <= set(result.table.metric)
