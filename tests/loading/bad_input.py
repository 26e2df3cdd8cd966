"""Bad inputs of ilab.load_model: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import torch

import interplab as ilab
from tests.contracts.rows import Row, T, V
from tests.model.custom_nets import MLP_SITES, TRANSFORMER_SITES, MLPNet, TinyTransformer
from tests.tiny import tiny_hf_model, tiny_tokenizer


def _three_heads_of_sixteen() -> ilab.Model:
    """A module whose n_heads does not divide its attn.hook_z width: refused at load."""
    net = TinyTransformer()
    net.n_heads = 3
    return ilab.load_model(net, sites=TRANSFORMER_SITES)


def _llama_without_layers() -> ilab.Model:
    """A mapped type (llama) whose module tree has lost its layer list: refused at load, naming what is missing."""
    hf = tiny_hf_model("llama")
    del hf.model.layers
    return ilab.load_model(hf, tokenizer=tiny_tokenizer())


ROWS: list[Row] = [
    Row("ilab.load_model", lambda c: ilab.load_model(42), T, "model must be None .*got int"),
    Row("ilab.load_model", lambda c: ilab.load_model(remote="cloud"), V, "remote='cloud' is not valid"),
    Row("ilab.load_model", lambda c: ilab.load_model(dtype="int8"), V, r"dtype='int8' is not valid; choose one of"),
    Row(
        "ilab.load_model", lambda c: ilab.load_model(dtype=torch.int8), V, r"dtype=torch\.int8 is not a floating dtype"
    ),
    Row(
        "ilab.load_model",
        lambda c: ilab.load_model(device=f"cuda:{torch.cuda.device_count()}"),
        V,
        r"device='cuda:\d+' does not exist: this machine has \d+ CUDA device",
    ),
    Row("ilab.load_model", lambda c: ilab.load_model(device="nowhere"), V, r"device='nowhere' is not a device"),
    Row(
        "ilab.load_model",
        lambda c: _llama_without_layers(),
        V,
        r"no decoder-layer list of 2 blocks under model \(module lists: none\).*model\.nn",
    ),
    Row(
        "ilab.load_model",
        lambda c: ilab.load_model(MLPNet(), sites={**MLP_SITES, "blocks.{L}.mlp.hook_post": "layers.{L}.relu"}),
        V,
        r"sites\['blocks.\{L\}.mlp.hook_post'\] = 'layers.\{L\}.relu': 'layers.0.relu' names no module of MLPNet\. "
        r"Its modules are: embed, layers, layers.0, layers.0.up, layers.0.act",
    ),
    Row(
        "ilab.load_model",
        lambda c: ilab.load_model(MLPNet(), sites={"blocks.{L}.hook_resid": "layers.{L}"}),
        V,
        r"sites key 'blocks.\{L\}.hook_resid' is not a site name.*Site keys are: hook_embed, "
        r"blocks.\{L\}.hook_resid_pre",
    ),
    Row(
        "ilab.load_model",
        lambda c: ilab.load_model(MLPNet(), sites={"blocks.{L}.hook_mlp_out": "layers.{L}.down:middle"}),
        V,
        r"'middle' is not one of output, input, weights",
    ),
    Row(
        "ilab.load_model",
        lambda c: ilab.load_model(MLPNet(), sites=MLP_SITES, tokenizer=["a", "b c"]),
        V,
        r"A vocabulary is a non-empty list of token names without spaces; got \['b c'\]",
    ),
    Row(
        "ilab.load_model",
        lambda c: ilab.load_model("gpt2", sites=MLP_SITES),
        V,
        r"sites= maps a plain torch\.nn\.Module",
    ),
    Row(
        "ilab.load_model",
        lambda c: _three_heads_of_sixteen(),
        V,
        r"TinyTransformer\.n_heads = 3 does not divide attn\.hook_z's width 16",
    ),
]
