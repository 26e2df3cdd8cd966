"""What a trace body may call: plain torch functions of envoys and tensors, shipped by value.

An NDIF server runs a trace body without interplab installed. nnsight pickles every object the
body names; a function of an installed package goes *by reference* (its module is imported on
the server), so an interplab function, an :class:`~interplab.core.saes.base.SAE` or a ``Model``
inside a body fails there. The functions here take only envoys, tensors, numbers and plain
containers, use only torch, and this module registers itself with cloudpickle to be pickled
*by value*: their source travels with the request.

The SAE functions read a dict of tensors (``sae.trace_params()``): ``W_enc``, ``b_enc``,
``b_in`` (what is subtracted from the input: ``b_dec`` or zeros), ``W_dec``, ``b_dec``, and
whichever of ``threshold`` (JumpReLU rule), ``k`` (TopK rule), ``W_mag``/``b_mag`` (gated
magnitude path) the architecture uses; with none of them the rule is ReLU.

Example
-------
>>> p = sae.trace_params()
>>> with model.nn.trace(text, **model.trace_kwargs):
...     x = read_site(envoy, io)
...     write_site(envoy, io, x + clamp_delta(p, x, latent=3, value=10.0, dir_D=p["W_dec"][3]))
"""

from __future__ import annotations

import sys
from typing import Any

import cloudpickle
import torch


def identity(value: Any) -> Any:
    """``value`` itself: the final norm of a model that has none."""
    return value


def read_site(envoy: Any, io: str) -> Any:
    """A site's tensor inside an nnsight trace (the first element when the module returns a tuple).

    An ``"edited"`` site (a module output its caller then edits in place, Falcon's MLP) is read as the module
    returned it: the caller goes on with a copy.

    A router's ``io`` names what of its output tuple to read: ``"element.I"`` its element ``I``,
    ``"topk.I.K.indices"`` / ``"topk.I.K.values"`` / ``"topk.I.K.softmax"`` the top ``K`` of element ``I`` over the
    experts and their softmax (for routers that return no indices); ``"keys.I.K.logits"`` / ``.indices`` /
    ``.weights`` a product-key router's logits [2, tokens, keys] at element ``I`` (:func:`product_keys`);
    ``"experts.E"`` an experts module's stacked output [E * tokens, d] as
    [tokens, E * d]. Routers and experts see tokens flattened, so these are [tokens, ...].
    """
    if io == "weights":
        return envoy.output[1]
    if io.startswith("experts."):
        out = envoy.output
        return out.view(int(io.split(".")[1]), -1, out.shape[-1]).transpose(0, 1).flatten(1)
    if io.startswith(("element.", "topk.", "keys.")):
        parts = io.split(".")
        value = envoy.output[int(parts[1])]
        if parts[0] == "element":
            return value
        if parts[0] == "keys":
            return product_keys(value, int(parts[2]), parts[3])
        top = torch.topk(value, int(parts[2]), dim=-1)
        if parts[3] == "softmax":
            return token_probs(top.values)
        return top.indices if parts[3] == "indices" else top.values
    if io == "edited":
        return _keep_output(envoy)
    value = envoy.output if io == "output" else envoy.input
    return value[0] if isinstance(value, tuple) else value


def _keep_output(envoy: Any) -> Any:
    """The output of a module its caller edits in place afterwards (``io == "edited"``): the caller goes on with a
    copy, so the tensor read keeps the value the module returned and stays in the autograd graph."""
    out = envoy.output
    first = out[0] if isinstance(out, tuple) else out
    envoy.output = (first.clone(), *out[1:]) if isinstance(out, tuple) else first.clone()
    return first


def product_keys(logits_2TN: torch.Tensor, k: int, what: str) -> torch.Tensor:
    """What a product-key router (Doge's) chose from its logits [2, tokens, keys]: ``"logits"`` each token's
    [2 * keys] (the halves are a view of the router's [..., 2 * keys] output, so a token's own are contiguous),
    ``"indices"`` the ``k`` experts ``a * keys + b`` whose summed key scores are highest, ``"weights"`` their
    softmax.

    >>> product_keys(torch.tensor([[[0.0, 2.0]], [[1.0, 0.0]]]), 1, "indices")
    tensor([[2]])
    """
    n_keys = logits_2TN.shape[-1]
    if what == "logits":
        return logits_2TN.reshape(logits_2TN.shape[1], 2 * n_keys)
    (scores_x, scores_y), (ids_x, ids_y) = logits_2TN.topk(n_keys, dim=-1)
    scores = (scores_x[..., :, None] + scores_y[..., None, :]).flatten(-2)
    ids = (ids_x[..., :, None] * n_keys + ids_y[..., None, :]).flatten(-2)
    top, where = scores.topk(k, dim=-1)
    return ids.gather(-1, where) if what == "indices" else token_probs(top)


def write_site(envoy: Any, io: str, value: Any) -> None:
    """Replace a site's tensor inside a trace, keeping the rest of a tuple output; the batch may change size.

    An ``"edited"`` site gets a copy of ``value`` (its caller edits it in place afterwards).

    A ``"stream"`` site is written in place (the block keeps that tensor as its residual stream), so
    its shape cannot change; attention patterns (``"weights"``) cannot be written.
    """
    if io == "weights":
        raise ValueError(
            "Attention patterns (attn.hook_pattern) can be read, not written: the attention output is computed "
            "from them inside the attention module. Write attn.hook_z or hook_attn_out instead."
        )
    if io.startswith(("element.", "topk.", "experts.", "keys.")):
        raise ValueError(
            "Routing sites (mlp.hook_router_logits, hook_expert_ids, hook_expert_weights, hook_expert_out) can be "
            "read, not written: the router's choice is made inside the MoE block. Write hook_mlp_in or hook_mlp_out "
            "instead."
        )
    if io == "stream":
        current = envoy.input
        if tuple(current.shape) != tuple(value.shape):
            raise ValueError(
                f"hook_resid_mid is written in place, so its shape {tuple(current.shape)} cannot change to "
                f"{tuple(value.shape)}; write hook_attn_out (the same point of the residual stream) instead."
            )
        current[...] = value
        return
    if io == "input":
        envoy.input = value
        return
    if io == "edited":  # the caller edits what it gets in place: a copy, so ``value`` itself is left as it is
        value = value.clone()
    current = envoy.output
    envoy.output = (value, *current[1:]) if isinstance(current, tuple) else value


def sae_encode(p: dict[str, Any], x: torch.Tensor) -> torch.Tensor:
    """Latent activations [..., d_sae] of ``x`` [..., d_in] under an SAE's ``trace_params()`` (on their device)."""
    x = x.to(p["W_enc"].device, p["W_enc"].dtype) - p["b_in"]
    pre = x @ p["W_enc"] + p["b_enc"]
    if "W_mag" in p:
        magnitude = (x @ p["W_mag"] + p["b_mag"]).relu()
        return (pre > 0).to(magnitude.dtype) * magnitude
    if "k" in p:
        vals, idx = torch.topk(pre, p["k"], dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, vals.relu())
    if "threshold" in p:
        return pre * (pre > p["threshold"])
    return pre.relu()


def sae_decode(p: dict[str, Any], acts: torch.Tensor) -> torch.Tensor:
    """Reconstruction [..., d_in] from latent activations under an SAE's ``trace_params()``."""
    return acts.to(p["W_dec"].device) @ p["W_dec"] + p["b_dec"]


def clamp_delta(p: dict[str, Any], x: torch.Tensor, latent: int, value: float, dir_D: torch.Tensor) -> torch.Tensor:
    """What clamping ``latent`` to ``value`` adds to ``x`` [..., D]: ``(value - a_latent(x)) * dir_D``.

    Encode, set the latent, decode and add back the reconstruction error is exactly this,
    because decoding is linear.
    """
    a = sae_encode(p, x)[..., latent : latent + 1].to(x.device, x.dtype)
    return (value - a) * dir_D.to(x.device, x.dtype)


def start_mask(lengths: torch.Tensor, width: int, start: int | None, left_padded: bool) -> torch.Tensor | None:
    """[B, width] bool: positions at or after ``start`` in each text's own tokens (None: all)."""
    if start is None:
        return None
    if isinstance(start, bool) or not isinstance(start, int):
        raise TypeError(f"start must be a token index (e.g. -1 for the last prompt token) or None, got {start!r}.")
    if int((lengths + start).min() if start < 0 else lengths.min() - start - 1) < 0:
        raise ValueError(f"start={start} is outside a prompt of {int(lengths.min())} tokens.")
    pad = width - lengths if left_padded else torch.zeros_like(lengths)
    first = pad + (lengths + start if start < 0 else start)
    return torch.arange(width)[None, :] >= first[:, None]


def steer(x: torch.Tensor, add_D: torch.Tensor | None, clamps: list[tuple[Any, ...]],
          mask_BL: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
    """The steered value of one site's tensor [B, L, D]: each clamp ``(params, latent, value, dir_D)``
    applied to the unsteered ``x``, then ``add_D`` added; ``mask_BL`` limits both to some positions."""
    out = x
    m = None if mask_BL is None else mask_BL.to(x.device, x.dtype)[..., None]
    for params, latent, value, dir_D in clamps:
        with torch.no_grad():
            delta = clamp_delta(params, x, latent, value, dir_D)
        out = out + (delta if m is None else m * delta)
    if add_D is not None:
        add = add_D.to(x.device, x.dtype)
        out = out + (add if m is None else m * add)
    return out


def orthonormal(A_DK: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning ``A_DK`` [D, k] (reduced QR, signs fixed so the map is smooth in ``A_DK``)."""
    Q, R = torch.linalg.qr(A_DK)
    sign = torch.sign(torch.diagonal(R))
    return Q * torch.where(sign == 0, torch.ones_like(sign), sign)


def interchange(base: torch.Tensor, source: torch.Tensor, Q_DK: torch.Tensor) -> torch.Tensor:
    """DAS's interchange intervention: ``base`` with its coordinates in the subspace of ``Q_DK`` (orthonormal
    columns) replaced by ``source``'s, ``base + (source - base) Q Q^T``, computed in ``Q_DK``'s dtype on its device
    and returned in ``base``'s."""
    b = base.to(Q_DK.device, Q_DK.dtype)
    return (b + ((source.to(Q_DK.device, Q_DK.dtype) - b) @ Q_DK) @ Q_DK.T).to(base.device, base.dtype)


def top_logits(d_MD: torch.Tensor, W_VD: torch.Tensor, n: int, chunk: int = 8192) -> tuple[torch.Tensor, ...]:
    """The ``n`` largest and smallest of ``d_MD @ W_VD.T`` per row, over the vocabulary in chunks (bounded memory).

    Returns ``(top_values, top_ids, bottom_values, bottom_ids)``, each [M, n]: largest first, most negative first.
    """
    M, V = d_MD.shape[0], W_VD.shape[0]
    top_v, top_i = torch.full((M, 0), 0.0), torch.zeros((M, 0), dtype=torch.int64)
    bot_v, bot_i = top_v.clone(), top_i.clone()
    with torch.no_grad():
        for start in range(0, V, chunk):
            logits_MC = d_MD.float() @ W_VD[start : start + chunk].float().T
            k = min(n, logits_MC.shape[1])
            tv, ti = logits_MC.topk(k, dim=1)
            bv, bi = logits_MC.topk(k, dim=1, largest=False)
            top_v, sel = torch.cat([top_v, tv], 1).topk(min(n, top_v.shape[1] + k), dim=1)
            top_i = torch.cat([top_i, ti + start], 1).gather(1, sel)
            bot_v, sel = torch.cat([bot_v, bv], 1).topk(min(n, bot_v.shape[1] + k), dim=1, largest=False)
            bot_i = torch.cat([bot_i, bi + start], 1).gather(1, sel)
    return top_v, top_i, bot_v, bot_i


def next_token_scores(
    readout: Any, hidden_BLD: Any, targets_BL: torch.Tensor, clean_BLD: torch.Tensor | None, step: int
) -> tuple[Any, Any, Any]:
    """Per-position next-token NLL of a run, and with ``clean_BLD`` the clean run's NLL and KL(clean || run).

    Meant for a trace body (remote too): only ``readout`` (see :attr:`Model.readout`) and torch
    operations, ``step`` positions at a time, so no [batch, pos, vocab] tensor is ever whole and only
    [batch, pos] values leave the trace. ``targets_BL`` holds each position's next token (anything at
    the last). Returns ``(nll_BL, clean_nll_BL, kl_BL)``; the last two are None without ``clean_BLD``.
    Without gradients the log-probabilities and the KL are computed in place: three [rows, vocab] float
    tensors live at once instead of about eight (each 16 MB for 16 rows of a 262,144-token vocabulary;
    glibc kept the difference as heap, 0.28 GB of a notebook kernel's peak).
    """
    nll, clean_nll, kl = [], [], []
    lean = not torch.is_grad_enabled()
    for a in range(0, targets_BL.shape[1], step):
        target = targets_BL[:, a : a + step, None]
        logp = log_probs(readout(hidden_BLD[:, a : a + step]), lean)
        nll.append(-logp.gather(-1, target)[..., 0])
        if clean_BLD is not None:
            logc = log_probs(readout(clean_BLD[:, a : a + step]), lean)
            clean_nll.append(-logc.gather(-1, target)[..., 0])
            if lean:
                diff = logc - logp
                del logp
                kl.append(diff.mul_(logc.exp_()).sum(-1))
                del diff, logc
            else:
                kl.append((logc.exp() * (logc - logp)).sum(-1))
    if clean_BLD is None:
        return torch.cat(nll, 1), None, None
    return torch.cat(nll, 1), torch.cat(clean_nll, 1), torch.cat(kl, 1)


# Logits are normalised in float32 only: a bfloat16 logsumexp or softmax rounds probabilities by several points
# (a normaliser near 30 has a bfloat16 step of 0.125, so exp(logit - lse) is off by several percent of
# itself). Every softmax, log-softmax and log-normaliser of logits in interplab is one of the three below;
# tests/contracts/test_normalising.py reads the source to keep it so.
def log_probs(logits: Any, in_place: bool = False) -> Any:
    """``log_softmax`` over the last axis in float32 (whatever ``logits``' dtype); with ``in_place`` (no
    gradients) in the float copy's own memory.

    >>> log_probs(torch.tensor([0.0, 0.0], dtype=torch.bfloat16)).exp()
    tensor([0.5000, 0.5000])
    """
    if not in_place:
        return torch.log_softmax(logits.float(), dim=-1)
    x = logits.float()
    del logits
    return x.sub_(x.logsumexp(-1, keepdim=True))


def token_probs(logits: Any) -> Any:
    """``softmax`` over the last axis in float32, whatever ``logits``' dtype.

    >>> token_probs(torch.tensor([0.0, 0.0], dtype=torch.bfloat16))
    tensor([0.5000, 0.5000])
    """
    return torch.softmax(logits.float(), dim=-1)


def log_normaliser(logits: Any) -> Any:
    """``logsumexp`` over the last axis in float32 (``logits - log_normaliser(logits)[..., None]`` are log-probs).

    >>> log_normaliser(torch.zeros(4, dtype=torch.bfloat16))
    tensor(1.3863)
    """
    return torch.logsumexp(logits.float(), dim=-1)


# Shipped by source with every request that names one of these functions (see the module docstring).
cloudpickle.register_pickle_by_value(sys.modules[__name__])
