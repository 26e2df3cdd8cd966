"""Exact grids that reuse the base run's keys and values (core/patching/cached.py) give the values of full
passes (``reuse_cache=False``) for every family, site, direction and metric, at a fraction of the work.

The tiny Gemma 3 has a sliding window of 8 tokens, shorter than these prompts: its cache must keep
every position for a pass that starts late (``activate_past_recording``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import interplab as ilab
from tests.tiny import tiny_model

CLEAN = ["Mary and John went to the store and John gave a drink to",
         "cat and dog went to the house and dog gave a drink to"]  # fmt: skip
CORRUPT = ["Mary and John went to the store and Mary gave a drink to",
           "cat and dog went to the house and cat gave a drink to"]  # fmt: skip
ANSWERS = ilab.patching.logit_diff([" Mary", " dog"], [" John", " cat"])


@pytest.fixture
def model(family):
    """A tiny model of each family with weights large enough (std 0.25) that patches move the logits by units."""
    m = tiny_model(family)
    with torch.no_grad():
        for p in m.module.parameters():
            if p.ndim > 1:
                p.mul_(0.25 / p.std())
    return m


def both(model, **kwargs):
    kwargs = {"clean": CLEAN, "corrupt": CORRUPT, "metric": ANSWERS, **kwargs}
    return ilab.patching.grid(model, **kwargs), ilab.patching.grid(model, reuse_cache=False, **kwargs)


def assert_same(fast, full):
    np.testing.assert_allclose(fast.values, full.values, atol=1e-5)
    assert fast.clean_baseline == pytest.approx(full.clean_baseline, abs=1e-6)
    assert fast.corrupt_baseline == pytest.approx(full.corrupt_baseline, abs=1e-6)
    np.testing.assert_allclose(fast.top_probs, full.top_probs, atol=1e-5)
    agree = fast.top_ids == full.top_ids
    assert agree.mean() > 0.99, agree.mean()  # ids may swap only where two probabilities tie to 1e-6


@pytest.mark.parametrize("site", ilab.patching.SITES)
def test_cached_grid_equals_full_passes(model, site):
    fast, full = both(model, site=site)
    assert_same(fast, full)
    assert np.abs(full.values - full.corrupt_baseline).max() > 0.01  # the grid has signal, far above 1e-5


@pytest.mark.parametrize("site", ["resid_pre", "heads", "mlp_out"])
def test_noising_positions_and_kl(site):
    model = tiny_model("gemma3")
    assert_same(*both(model, site=site, direction="noise", positions=[-1, 3, 9]))
    fast, full = both(model, site="resid_post", metric=ilab.metrics.kl_to_clean(), batch_size=3)
    assert_same(fast, full)
    assert fast.values[-1, -1] == pytest.approx(0.0, abs=1e-5)  # the clean run's own last-layer output


def test_remote_local_runs_the_cached_path():
    local = tiny_model("llama")
    remote = tiny_model("llama", remote="local")
    for site in ("resid_pre", "attn_out"):
        a, b = ilab.patching.grid(local, CLEAN, CORRUPT, ANSWERS, site=site), ilab.patching.grid(
            remote, CLEAN, CORRUPT, ANSWERS, site=site)  # fmt: skip
        np.testing.assert_allclose(a.values, b.values, atol=1e-6)


def _mlp_tokens(model, run) -> int:
    """Token rows that really went through an MLP (skipped blocks run none) while ``run()`` ran."""
    seen = [0]
    mlps = [model.module.get_submodule(f"{model.family.layers}.{i}.{model.family.mlp_out}")
            for i in range(model.n_layers)]  # fmt: skip

    def count(_mod, args):
        x = args[0]
        seen[0] += int(x.shape[0] * x.shape[1])

    handles = [m.register_forward_pre_hook(count) for m in mlps]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return seen[0]


@pytest.mark.parametrize("overhead", [0, 10**6])
def test_cells_run_only_from_their_layer_and_position(family, overhead, monkeypatch):
    """The work of a resid_pre grid: each cell's pass covers positions p.. from layer l on (with no fixed cost
    per pass), or the layer's cells share one pass from the first changed position (with a huge one)."""
    import interplab.core.patching.cached as cached_mod

    monkeypatch.setattr(cached_mod, "PASS_OVERHEAD", overhead)
    monkeypatch.setattr(cached_mod, "BLOCK_TOKENS", 0)
    model = tiny_model(family)
    metric = ilab.patching.logit_diff(" Mary", " John")
    fast = _mlp_tokens(model, lambda: ilab.patching.grid(model, CLEAN[0], CORRUPT[0], metric))
    full = _mlp_tokens(model, lambda: ilab.patching.grid(model, CLEAN[0], CORRUPT[0], metric, reuse_cache=False))
    # 14 tokens; the prompts differ at position 9, so layer 0 has one changed cell (9) and layer 1 five (9..13).
    # Both paths first run the two prompts through both blocks: 2 x 2 x 14 = 56 token rows.
    # Full passes: layer 0, cell 9 through both blocks (2 x 14); layer 1, the base prompt through block 0 and
    # the five cells through block 1 (14 + 5 x 14).
    assert full == 56 + 2 * 14 + (14 + 5 * 14) == 168
    # Cached passes: layer 0, cell 9 from position 9 (5 tokens) through both blocks; layer 1 through block 1
    # only: cells 9..13 each from their own position (5 + 4 + 3 + 2 + 1), or all five from 9 (5 x 5).
    assert fast == 56 + 2 * 5 + (15 if overhead == 0 else 25)


def test_cells_share_a_pass_when_rerunning_tokens_is_cheaper():
    """The split into passes minimises the modelled cost: fixed cost per pass plus tokens x blocks."""
    from interplab.core.patching.cached import BLOCK_TOKENS, PASS_OVERHEAD, group_positions, pass_cost

    cells = [(c, p) for c, p in enumerate([0, 1, 2, 3, 10, 11, 40, 41, 42, 43])]
    for n_pairs, n_pos, n_blocks, max_cells in [(1, 44, 1, 64), (8, 44, 18, 64), (1, 44, 12, 3), (2, 200, 6, 4)]:
        plan = group_positions(cells, n_pairs, n_pos, n_blocks, max_cells)
        assert sorted(c for g, _ in plan for c in g) == list(range(len(cells)))  # every cell once, in order
        assert all(len(g) <= max_cells and start == cells[g[0]][1] for g, start in plan)
        cost = sum(pass_cost(n_pairs * len(g), n_pos - start, n_blocks) for g, start in plan)
        # brute force: every split of the cells into runs of neighbours
        best = float("inf")
        for mask in range(2 ** (len(cells) - 1)):
            cuts = [0] + [i + 1 for i in range(len(cells) - 1) if mask >> i & 1] + [len(cells)]
            runs = [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]
            if all(b - a <= max_cells for a, b in runs):
                best = min(best, sum(pass_cost(n_pairs * (b - a), n_pos - cells[a][1], n_blocks) for a, b in runs))
        assert cost == pytest.approx(best), (n_pairs, n_blocks, plan)
    assert len(group_positions(cells, 1, 44, 1, 64)) <= 3  # one late block: passes cost more than tokens
    assert PASS_OVERHEAD > 0 and BLOCK_TOKENS > 0


def test_a_real_remote_model_runs_full_passes_unless_asked(monkeypatch):
    """On an NDIF server (remote=True or a URL) the cached path is not the default: full passes are known to work."""
    import interplab.core.patching.cached as cached_mod

    model = tiny_model("llama")
    monkeypatch.setattr(model, "remote", "https://ndif.example")
    monkeypatch.setattr(type(model), "trace_kwargs", property(lambda self: {}))  # run here all the same

    def refuse(*args, **kwargs):
        raise AssertionError("the cached path ran")

    monkeypatch.setattr(cached_mod, "grid_cached", refuse)
    ilab.patching.grid(model, CLEAN[0], CORRUPT[0], ilab.patching.logit_diff(" Mary", " John"), positions=[-1])
    with pytest.raises(AssertionError, match="cached path ran"):
        ilab.patching.grid(model, CLEAN[0], CORRUPT[0], ilab.patching.logit_diff(" Mary", " John"), reuse_cache=True)


@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_a_cache_without_keys_falls_back_to_full_passes_saying_so(kind):
    """Mamba's cache keeps SSM and convolution states, no keys and values per position: the default grid runs full
    passes with a warning naming the cache layers, and equals reuse_cache=False."""
    from tests.model.test_mamba_sites import tiny_mamba
    from tests.tiny import tiny_tokenizer

    model = ilab.load_model(tiny_mamba(kind), tokenizer=tiny_tokenizer())
    kwargs = {"clean": CLEAN, "corrupt": CORRUPT, "metric": ANSWERS}
    with pytest.warns(UserWarning, match=r"runs full passes .*without per-position keys and values \(LinearAttention"):
        default = ilab.patching.grid(model, **kwargs)
    full = ilab.patching.grid(model, reuse_cache=False, **kwargs)
    np.testing.assert_array_equal(default.values, full.values)
    assert default.values.shape == (2, len(CLEAN[0].split()) + 1)
    assert np.abs(full.values - full.corrupt_baseline).max() > 0


@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_mamba_grid_equals_patched_forwards_by_torch_hooks(kind):
    """The control for Mamba's full-pass grid: each cell (block, position) is the corrupt run with that block's input
    at that position replaced by the clean run's, made with torch hooks on the Hugging Face model, and the logit
    difference of the answers read from its logits."""
    from tests.model.test_mamba_sites import tiny_mamba
    from tests.tiny import tiny_tokenizer

    hf = tiny_mamba(kind)
    model = ilab.load_model(hf, tokenizer=tiny_tokenizer())
    grid = ilab.patching.grid(model, CLEAN, CORRUPT, ANSWERS, site="resid_pre", reuse_cache=False)
    clean, corrupt = (model.to_tokens(texts)["input_ids"] for texts in (CLEAN, CORRUPT))
    answers = [[tiny_tokenizer()(w, add_special_tokens=False)["input_ids"] for w in ws]
               for ws in ([" Mary", " dog"], [" John", " cat"])]  # fmt: skip
    assert all(len(ids) == 1 for ws in answers for ids in ws)
    seen: list[torch.Tensor] = []
    blocks = hf.backbone.layers

    def run(ids: torch.Tensor, layer: int | None = None, position: int = 0) -> float:
        def patch(_module, args):
            if layer is None:
                seen.append(args[0].clone())
                return None
            hidden = args[0].clone()
            hidden[:, position] = stored[layer][:, position]
            return (hidden, *args[1:])

        hooks = [b.register_forward_pre_hook(patch) for i, b in enumerate(blocks) if layer in (None, i)]
        try:
            with torch.no_grad():
                logits = hf(input_ids=ids).logits[:, -1]
        finally:
            for hook in hooks:
                hook.remove()
        rows = torch.arange(len(ids))
        good, bad = (torch.tensor([a[0] for a in ws]) for ws in answers)
        return float((logits[rows, good] - logits[rows, bad]).mean())

    run(clean)
    stored = list(seen)
    assert grid.corrupt_baseline == pytest.approx(run(corrupt), abs=1e-5)
    want = [[run(corrupt, layer, p) for p in range(corrupt.shape[1])] for layer in range(len(blocks))]
    np.testing.assert_allclose(grid.values, np.array(want), atol=1e-5)
    assert np.abs(grid.values - grid.corrupt_baseline).max() > 1e-3
