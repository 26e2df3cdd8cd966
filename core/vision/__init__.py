"""Vision models: the second-order lens of CLIP neurons (Gandelsman et al., ICLR 2025).

The public namespace ``ilab.vision``. The engine side (CLIP and ViT towers as models, images as inputs) is
:mod:`interplab.core.model.vision`; ``second_order.py`` has :func:`second_order` and its result,
``view.py`` the data of the patch heatmap widget (also of a patching grid's row over an image), ``train.py``
a small CLIP's resumable contrastive training.

Example
-------
>>> model = ilab.load_model(clip)                  # a transformers CLIPModel
>>> so = ilab.vision.second_order(model, (1, 17), images)
>>> so.share_significant, so.rank1().explained, so.describe(vocabulary, k=3)
"""

from __future__ import annotations

from .second_order import Decomposition, Rank1, SecondOrder, second_order, sparse_decomposition
from .train import ClipTraining, train_clip
from .view import PatchData, patch_data, patching_row

__all__ = ["ClipTraining", "Decomposition", "PatchData", "Rank1", "SecondOrder", "patch_data", "patching_row",
           "second_order", "sparse_decomposition", "train_clip"]  # fmt: skip
