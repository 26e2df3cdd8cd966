"""Train a small SAE on a tensor held in memory (decoder rows for a meta-SAE, a notebook's sample).

For the activation streams of real SAEs use :func:`~.single.train_sae` (stores, checkpoints, resumption);
this is the short in-memory loop: shuffled batches of the rows, the architecture's own loss
(so the fast sparse path of TopK-style SAEs), Adam, unit-norm decoder rows.

Example
-------
>>> meta = fit_tensor(sae.W_dec.detach(), arch="batchtopk", width=256, k=4, steps=2000)
"""

from __future__ import annotations

from typing import Any

import torch
from tqdm.auto import tqdm

from ...checks import check_int, check_number
from ..base import SAE, arch_class


def fit_tensor(
    x_TD: torch.Tensor, arch: str = "batchtopk", width: int = 256, k: int | None = None, steps: int = 1000,
    batch_size: int = 1024, lr: float = 1e-3, seed: int = 0, site: str = "", progress: bool = True, **settings: Any,
) -> SAE:  # fmt: skip
    """An SAE of ``arch`` trained on the rows of ``x_TD`` [T, D] for ``steps`` Adam steps, on ``x_TD``'s
    device (the SAE is initialised on the CPU, then moved there).

    >>> sae = fit_tensor(acts.flat("blocks.6.hook_resid_post"), arch="topk", width=512, k=16, steps=500)
    """
    if not isinstance(x_TD, torch.Tensor) or x_TD.ndim != 2 or len(x_TD) == 0:
        raise ValueError(f"x_TD must be a 2-D tensor of rows [T, D], got {getattr(x_TD, 'shape', type(x_TD))}.")
    if not bool(torch.isfinite(x_TD).all()):
        raise ValueError("x_TD holds NaN or inf values.")
    cls = arch_class(arch)
    steps, batch_size = check_int("steps", steps, minimum=1), check_int("batch_size", batch_size, minimum=1)
    lr = check_number(lr, "lr")
    spec = cls.with_defaults({"k": k, **settings})
    sae = SAE.create(arch, d_in=x_TD.shape[1], d_sae=check_int("width", width, minimum=1), site=site, **spec)
    sae.init_weights(seed)
    x = x_TD.detach().float()
    sae.to(x.device)
    with torch.no_grad():
        sae.b_dec.copy_(x.median(0).values)
    opt = torch.optim.Adam(sae.parameters(), lr=lr, betas=(0.9, 0.999))
    gen = torch.Generator().manual_seed(seed)
    last_fired = torch.zeros(sae.d_sae, dtype=torch.long, device=x.device)
    sae.train(True)
    for step in tqdm(range(steps), desc=f"fit {arch}", disable=not progress, leave=False):
        batch = x[torch.randint(len(x), (min(batch_size, len(x)),), generator=gen).to(x.device)]
        dead = (step - last_fired) > max(50, steps // 10)
        loss, out = sae.training_loss(batch, dead=dead)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sae.remove_parallel_grad()
        opt.step()
        sae.normalize_decoder()
        last_fired[out["fired"]] = step
    return sae.eval()
