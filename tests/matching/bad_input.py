"""Bad inputs of ilab.matching: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import numpy as np
import torch

import interplab as ilab
from tests.contracts.rows import SITE, I, Row, T, V, before_work

ROWS: list[Row] = [
    Row(
        "ilab.matching.match",
        lambda c: ilab.matching.match(c.sae, ilab.SAE.create("topk", 32, 12, k=2)),
        V,
        r"sae_a has 24 latents and sae_b 12",
    ),
    Row(
        "ilab.matching.match",
        lambda c: ilab.matching.match(c.sae, c.sae, candidates=0),
        V,
        r"candidates must be a positive integer, got 0",
    ),
    Row(
        "ilab.matching.match",
        lambda c: ilab.matching.match(c.sae, c.sae, folded="no"),
        T,
        r"folded must be True \(fold thresholds in, SAE Match\) or False, got 'no'",
    ),
    Row("ilab.matching.folding_gain", lambda c: ilab.matching.folding_gain({}, [c.sae]), V, r"at least two SAEs"),
    Row(
        "ilab.matching.folding_gain",
        lambda c: ilab.matching.folding_gain({}, [c.sae, c.sae]),
        V,
        r"acts holds no activations for 'blocks.1.hook_resid_post' \(saes\[0\]'s site\); it holds \[\]",
    ),
    Row(
        "ilab.matching.folding_gain",
        lambda c: ilab.matching.folding_gain({SITE: torch.zeros(4, 32)}, [c.sae, c.sae], n_random=0),
        V,
        r"n_random must be a positive integer, got 0",
    ),
    Row("ilab.matching.match_chain", lambda c: ilab.matching.match_chain([c.sae]), V, r"at least two SAEs"),
    Row(
        "ilab.matching.lineage",
        lambda c: ilab.matching.lineage([ilab.matching.match(c.sae, c.sae)], 30),
        I,
        r"Latent 30 is out of range: latents are 0\.\.23",
    ),
    Row("ilab.matching.paths", lambda c: ilab.matching.paths([]), T, r"non-empty list of Match"),
    Row("ilab.matching.compose", lambda c: ilab.matching.compose(["x"]), T, r"non-empty list of Match"),
    Row(
        "ilab.matching.approximate",
        lambda c: ilab.matching.approximate(torch.ones(2, 32), c.sae, c.sae, np.arange(3)),
        V,
        r"perm must map 24",
    ),
    Row(
        "ilab.matching.explained_by_gap",
        lambda c: ilab.matching.explained_by_gap({}, [c.sae, c.sae]),
        V,
        r"acts holds no activations for 'blocks\.1\.hook_resid_post'",
    ),
    Row(
        "ilab.matching.explained_by_gap",
        lambda c: ilab.matching.explained_by_gap({}, [c.sae], max_gap=-1),
        V,
        r"max_gap must be an integer >= 0, got -1",
    ),
    Row(
        "ilab.matching.stitch",
        lambda c: ilab.matching.stitch(c.sae, c.sae, torch.ones(4, 32), threshold=1.5),
        V,
        r"threshold is a cosine similarity in \(0, 1\), got 1\.5",
    ),
    Row(
        "ilab.matching.stitch",
        lambda c: ilab.matching.stitch(c.sae, c.sae, torch.ones(4, 7)),
        V,
        r"x_TD must be activations \[T, 32\]",
    ),
    Row(
        "ilab.matching.train_meta_sae",
        lambda c: ilab.matching.train_meta_sae(c.sae, width=99),
        V,
        r"width must be an integer in 1\.\.24, got 99",
    ),
    Row(
        "ilab.matching.decompose", lambda c: ilab.matching.decompose(c.sae, c.sae, 99), I, r"Latent 99 is out of range"
    ),
    Row(
        "ilab.matching.meta_table",
        lambda c: ilab.matching.meta_table(ilab.SAE.create("topk", 16, 8, k=2), c.sae),
        V,
        r"meta reads d_in=16, but sae's decoder rows have width 32",
    ),
    Row(
        "ilab.matching.correlate",
        lambda c: ilab.matching.correlate(torch.ones(3, 2), torch.ones(4, 2)),
        V,
        r"same tokens",
    ),
    Row(
        "ilab.matching.similarity", lambda c: ilab.matching.similarity(c.model, c.sae, c.model, c.sae, ""), V, r"empty"
    ),
    Row(
        "ilab.matching.explained_variance",
        lambda c: ilab.matching.explained_variance(torch.ones(3, 2), torch.ones(3, 5)),
        V,
        r"must both be \[tokens, width\] of one shape, got \[3, 2\] and \[3, 5\]",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.matching.fold": "takes an SAE (any SAE folds); match, which calls it, has rows",
    "ilab.matching.thresholds": "takes an SAE (any SAE has thresholds or ones); match has rows",
    "ilab.matching.align_ends": "lists of ints from token_ends; similarity, which calls it, has rows",
    "ilab.matching.explained_variance_chart": "draws the DataFrame explained_by_gap made (which has rows)",
    "ilab.matching.Folded": "a dataclass built by fold",
    "ilab.matching.FoldingGain": "a result built by folding_gain (which has rows)",
    "ilab.matching.Match": "a result built by match (which has rows)",
    "ilab.matching.Match.share_below": "bound: check_number, the same check every number passes",
    "ilab.matching.Similarity": "a result built by similarity / correlate (which have rows)",
    "ilab.matching.Stitching": "a result built by stitch (which has rows)",
}


def _converged() -> ilab.matching.ConvergedSAE:
    history = {"step": [10, 20, 30], "train_fvu": [0.5] * 3, "heldout_fvu": [0.5] * 3, "heldout_l0": [2.0] * 3}
    return ilab.matching.ConvergedSAE(ilab.SAE.create("batchtopk", 32, 8, k=2), history, 100, 30, 8)


def _resemblance() -> ilab.matching.MetaResemblance:
    sae = ilab.SAE.create("topk", 32, 8, k=2)
    return ilab.matching.meta_resemblance(sae, sae, sae)


ROWS += [
    Row(
        "ilab.matching.train_converged",
        before_work(lambda c: ilab.matching.train_converged(c.model, SITE, None, width=0)),
        V,
        r"width must be a positive integer, got 0",
    ),
    Row(
        "ilab.matching.train_converged",
        before_work(lambda c: ilab.matching.train_converged(c.model, SITE, None, n_tokens=4096, held_out=4096)),
        V,
        r"held_out must be an integer in 1\.\.3072, got 4096",
    ),
    Row(
        "ilab.matching.ConvergedSAE.tail_change",
        lambda c: _converged().tail_change(1.5),
        V,
        r"tail is a share of the steps in \(0, 1\), got 1\.5",
    ),
    Row(
        "ilab.matching.ConvergedSAE.tail_share",
        lambda c: _converged().tail_share(tail=2),
        V,
        r"tail is a share of the steps in \(0, 1\), got 2",
    ),
    Row(
        "ilab.matching.ConvergedSAE.converged",
        lambda c: _converged().converged(tolerance=-1),
        V,
        r"tolerance is a share of the fall in \(0, 1\), got -1",
    ),
    Row(
        "ilab.matching.ConvergedSAE.chart",
        lambda c: _converged().chart(tail=0),
        V,
        r"tail is a share of the steps in \(0, 1\), got 0",
    ),
    Row(
        "ilab.matching.novel_insertion",
        lambda c: ilab.matching.novel_insertion(c.sae, c.sae, torch.ones(4, 7)),
        V,
        r"x_TD must be activations \[T, 32\]",
    ),
    Row(
        "ilab.matching.novel_insertion",
        lambda c: ilab.matching.novel_insertion(c.sae, ilab.SAE.create("topk", 16, 8, k=2), torch.ones(4, 32)),
        V,
        r"small reads d_in=32 and large d_in=16",
    ),
    Row(
        "ilab.matching.meta_resemblance",
        lambda c: ilab.matching.meta_resemblance(ilab.SAE.create("topk", 16, 8, k=2), c.sae, c.sae),
        V,
        r"meta must be an SAE on 32-wide decoder rows, got TopKSAE reading d_in=16",
    ),
    Row(
        "ilab.matching.MetaResemblance.margin",
        lambda c: _resemblance().margin("shuffled"),
        V,
        r"control='shuffled' is not a control here; choose one of \['decoder-covariance random', 'random unit'\]",
    ),
    Row(
        "ilab.matching.MetaResemblance.holds",
        lambda c: _resemblance().holds(sigmas=-2),
        V,
        r"sigmas must be a number >= 0\.0, got -2",
    ),
]
EXEMPT.update(
    {
        "ilab.matching.ConvergedSAE": "a result built by train_converged (which has rows)",
        "ilab.matching.NovelInsertion": "a result built by novel_insertion (which has rows)",
        "ilab.matching.MetaResemblance": "a result built by meta_resemblance (which has rows)",
    }
)
