"""Features across layers, sizes and models: SAE Match, lineage, stitching, meta-SAEs, universality.

``folding.py`` folds thresholds and pairs latents (linear assignment, scipy); ``gain.py`` measures
folding's gain (gap-1 approximation with folded, unfolded and random pairings); ``lineage.py`` chains
matches over layers; ``approximate.py`` predicts a later layer's hidden state through matched
latents; ``stitching.py`` moves latents of a large SAE into a small one; ``meta.py`` trains meta-SAEs
on decoder rows; ``converged.py`` trains a smaller SAE to convergence as a resumable job; ``claims.py``
measures the stitching paper's comparisons against controls; ``crossmodel.py`` correlates latents of two
models on shared text.

Example
-------
>>> m = ilab.matching.match(sae_a, sae_b)
>>> chain = ilab.matching.match_chain([sae5, sae6, sae7]); ilab.matching.lineage(chain, 12)
"""

from .approximate import approximate, explained_by_gap, explained_variance, explained_variance_chart
from .claims import MetaResemblance, NovelInsertion, meta_resemblance, novel_insertion
from .converged import ConvergedSAE, train_converged
from .crossmodel import Similarity, align_ends, correlate, similarity
from .folding import Folded, Match, fold, match, thresholds
from .gain import FoldingGain, folding_gain
from .lineage import compose, lineage, match_chain, paths
from .meta import decompose, meta_table, train_meta_sae
from .stitching import Stitching, stitch

__all__ = [
    "ConvergedSAE",
    "Folded",
    "FoldingGain",
    "Match",
    "MetaResemblance",
    "NovelInsertion",
    "Similarity",
    "Stitching",
    "align_ends",
    "approximate",
    "compose",
    "correlate",
    "decompose",
    "explained_by_gap",
    "explained_variance",
    "explained_variance_chart",
    "fold",
    "folding_gain",
    "lineage",
    "match",
    "match_chain",
    "meta_resemblance",
    "meta_table",
    "novel_insertion",
    "paths",
    "similarity",
    "stitch",
    "thresholds",
    "train_converged",
    "train_meta_sae",
]
