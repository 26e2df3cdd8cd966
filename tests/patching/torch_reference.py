"""A slow, independent reference for the patching tests: plain Hugging Face forwards with torch hooks
(one forward per patched cell, autograd through the hooks), the prompts and the metric they share."""

from __future__ import annotations

import numpy as np
import torch
from interplab.core.model.sites import resolve, site_module_path

import interplab as ilab

CLEAN = "Mary and John went to the store and John gave a drink to"
CORRUPT = "Mary and John went to the store and Mary gave a drink to"
CLEAN2 = "cat and dog went to the house and dog gave a drink to"
CORRUPT2 = "cat and dog went to the house and cat gave a drink to"
KIND_HOOK = {"resid_pre": "hook_resid_pre", "resid_post": "hook_resid_post", "attn_out": "hook_attn_out",
             "mlp_out": "hook_mlp_out", "heads": "attn.hook_z"}  # fmt: skip


def metric():
    return ilab.patching.logit_diff(" Mary", " John")


def _module_and_io(model, site, layer):
    (parsed,) = model.parse_sites(f"blocks.{layer}.{KIND_HOOK[site]}")
    path, io = site_module_path(model.family, parsed)
    return resolve(model.module, path), io


def hf_run(model, ids, site=None, layer=None, edit=None, grad=False):
    """Final-position logits of a plain HF forward, with ``edit(value) -> value`` applied at a site."""
    hf = model.module
    handles, captured = [], {}
    if site is not None:
        module, io = _module_and_io(model, site, layer)

        def pre(mod, args, kwargs):
            if args:
                value = edit(args[0])
                captured["x"] = value
                return (value, *args[1:]), kwargs
            value = edit(kwargs["hidden_states"])
            captured["x"] = value
            return args, {**kwargs, "hidden_states": value}

        def post(mod, args, out):
            first = out[0] if isinstance(out, tuple) else out
            value = edit(first)
            captured["x"] = value
            return (value, *out[1:]) if isinstance(out, tuple) else value

        if io == "input":
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(post))
    try:
        with torch.set_grad_enabled(grad):
            logits = hf(input_ids=ids).logits[:, -1].float()
    finally:
        for h in handles:
            h.remove()
    return model.softcap(logits), captured.get("x")


def hf_site(model, ids, site, layer):
    _, value = hf_run(model, ids, site, layer, edit=lambda v: v)
    return value.detach().clone()


def slow_grid(model, clean, corrupt, site, positions=None, direction="denoise"):
    """One plain forward per cell (the definition of activation patching)."""
    ids_c, ids_x = model.to_tokens(clean)["input_ids"], model.to_tokens(corrupt)["input_ids"]
    base, src = (ids_x, ids_c) if direction == "denoise" else (ids_c, ids_x)
    n_pos = ids_c.shape[1]
    positions = list(range(n_pos)) if positions is None else positions
    a, w = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    cols = range(model.n_heads) if site == "heads" else positions
    out = np.zeros((model.n_layers, len(cols)))
    for layer in range(model.n_layers):
        src_val = hf_site(model, src, site, layer)
        for c, col in enumerate(cols):

            def edit(v, col=col, src_val=src_val):
                v = v.clone()
                if site == "heads":
                    sl = slice(col * model.d_head, (col + 1) * model.d_head)
                    v[:, positions, sl] = src_val[:, positions, sl]
                else:
                    v[:, col] = src_val[:, col]
                return v

            logits, _ = hf_run(model, base, site, layer, edit)
            out[layer, c] = float(logits[0, a] - logits[0, w])
    return out


def _layer0_pre_hook(model, value):
    """A forward pre-hook on the first block that replaces its input (the embeddings) by ``value``."""
    block = resolve(model.module, f"{model.family.layers}.0")

    def pre(mod, args, kwargs):
        if args:
            return (value, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": value}

    return block.register_forward_pre_hook(pre, with_kwargs=True)


def ig_reference(model, ids_c, ids_x, site, layer, steps, answers, path="embeddings"):
    """Plain torch: d mean log P(answer) / d site, averaged over embeddings ``e_x + k/steps (e_c - e_x)``
    (``path="site"``: over the site's own values ``x_x + k/steps (x_c - x_x)``, the rest of the run corrupted)."""
    e_c, e_x = hf_site(model, ids_c, "resid_pre", 0), hf_site(model, ids_x, "resid_pre", 0)
    x_c, x_x = hf_site(model, ids_c, site, layer), hf_site(model, ids_x, site, layer)
    total = 0
    for k in range(steps):
        handle = _layer0_pre_hook(model, e_x + k / steps * (e_c - e_x) if path == "embeddings" else e_x)
        holder = {}

        def edit(v, holder=holder, k=k):
            v = (v if path == "embeddings" else x_x + k / steps * (x_c - x_x)).detach().requires_grad_(True)
            holder["v"] = v
            return v

        try:
            logits, _ = hf_run(model, ids_x, site, layer, edit, grad=True)
        finally:
            handle.remove()
        value = torch.log_softmax(logits, -1)[torch.arange(len(answers)), answers].mean()
        (grad,) = torch.autograd.grad(value, holder["v"])
        total = total + grad / steps
    return total


def tiny_sae(model, layer=1):
    sae = ilab.SAE.create("topk", d_in=model.d_model, d_sae=48, k=12, site=f"blocks.{layer}.hook_resid_post")
    sae.init_weights(seed=1)
    return sae
