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

from .model import check_texts, position_columns
from .sites import resolve

if TYPE_CHECKING:
    from .model import Model


def logit_lens(model: Model, texts: str | Sequence[str], position: int = -1) -> torch.Tensor:
    """Logits read from every block's output at one position of each text.

    Returns [batch, n_layers, vocab]. The last layer's row equals ``model.logits``
    at that position. Runs inside one trace, so it works remotely too.
    """
    texts = check_texts(texts)
    family = model.family
    if family is None:
        model._parse("blocks.0.hook_resid_post")  # raises, naming the supported model types
    enc = model.to_tokens(texts)
    lengths = enc["attention_mask"].sum(1)
    cols = position_columns(lengths, [position])[:, 0]
    rows = torch.arange(len(texts))
    blocks = [resolve(model.nn, f"{family.layers}.{layer}") for layer in range(model.n_layers)]
    norm = resolve(model.nn, family.final_norm)
    unembed = resolve(model.nn, family.unembed)
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    with torch.no_grad(), model.nn.trace(inputs, **model._trace_kwargs()) as tracer:
        per_layer = []
        for block in blocks:
            out = block.output
            if isinstance(out, tuple):
                out = out[0]
            per_layer.append(unembed(norm(out[rows, cols])))
        per_layer = nnsight.save(per_layer)
        tracer.stop()
    logits = torch.stack([p.detach().to("cpu") for p in per_layer], 1)
    return model._softcap(logits)
