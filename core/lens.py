"""The logit lens: read each layer's residual stream through the final norm and unembedding.

Example
-------
>>> lens = logit_lens(model, "When Mary and John went to the store, John gave a drink to")
>>> lens.shape                       # [batch, n_layers, vocab] at the last position
>>> (lens[0, :, mary] - lens[0, :, john])   # when the answer appears, layer by layer
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import nnsight
import torch

from .checks import check_texts
from .model import position_columns
from .sites import read_site

if TYPE_CHECKING:
    from .model import Model


def logit_lens(model: Model, texts: str | Sequence[str], position: int = -1) -> torch.Tensor:
    """Logits read from every block's output at one position of each text.

    Returns float32 [batch, n_layers, vocab]. The last layer's row equals ``model.logits``
    at that position. Runs inside one trace, so it works remotely too.
    """
    texts = check_texts(texts)
    model.check_mapped()
    enc = model.to_tokens(texts)
    lengths = enc["attention_mask"].sum(1)
    cols = position_columns(lengths, [position])[:, 0]
    rows = torch.arange(len(texts))
    blocks = [model.block(layer) for layer in range(model.n_layers)]
    readout = model.readout
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        per_layer = []
        for block in blocks:
            per_layer.append(readout(read_site(block, "output")[rows, cols]))
        per_layer = nnsight.save(per_layer)
        tracer.stop()
    return torch.stack([p.detach().to("cpu", torch.float32) for p in per_layer], 1)
