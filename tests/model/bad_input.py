"""Bad inputs of the Model and Activations: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import torch
from interplab.core.memory.budget import MemoryBudgetError

import interplab as ilab
from tests.contracts.rows import SITE, Row, T, V, a_file
from tests.memory.bad_input import under_budget
from tests.tiny import TEXTS, tiny_tokenizer


def _tiny(kind: str, **config) -> torch.nn.Module:
    """A two-layer random model of a Hugging Face ``model_type`` (built in milliseconds)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    sizes = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=64, **config)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **sizes)).eval()


def _t5() -> torch.nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(num_layers=2, d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=64))


def _no_layer_list() -> ilab.Model:
    """CPM-Ant keeps its blocks where no list of num_hidden_layers blocks sits under the decoder: nothing is derived."""
    return ilab.load_model(
        _tiny("cpmant", dim_model=64, num_heads=4, dim_head=16, dim_ff=128), tokenizer=tiny_tokenizer()
    )


LONG = " ".join(["the"] * 100)  # 101 tokens: the other texts are padded to it
BAD_TEXT = "hello \ud800 world"
NOT_UNICODE = r"is not valid Unicode: character 6 is a lone surrogate '\\ud800'"

ROWS: list[Row] = [
    Row(
        "ilab.logit_lens",
        lambda c: ilab.logit_lens(_no_layer_list(), TEXTS),
        V,
        r"model_type 'cpmant': no decoder-layer list of 2 blocks under cpmant \(module lists: none\)\. Read its "
        r"modules through model\.nn .*or name the sites by module path with load_model\(module, sites=",
    ),
    Row(
        "Model.collect",
        lambda c: _no_layer_list().collect(TEXTS, "resid_post"),
        V,
        r"Named sites are not mapped .*model_type 'cpmant'.*Use model\.nn",
    ),
    Row(
        "ilab.load_model",
        lambda c: ilab.load_model(_t5(), tokenizer=tiny_tokenizer()),
        V,
        r"model_type 't5' is an encoder-decoder model \(T5ForConditionalGeneration\); interplab maps sites of "
        r"decoder-only causal LMs",
    ),
    Row(
        "Model.collect",
        lambda c: ilab.load_model(
            _tiny("jamba", num_key_value_heads=2, intermediate_size=128, attn_layer_period=2, attn_layer_offset=1),
            tokenizer=tiny_tokenizer(),
        ).collect(TEXTS, "blocks.0.hook_attn_out"),
        V,
        r"'blocks\.0\.hook_attn_out' does not exist in this model: block 0 \(JambaMambaDecoderLayer\) has only "
        r"resid_pre, resid_mid, mlp_in, .*resid_post",
    ),
    Row("ilab.Model", lambda c: ilab.Model(None, None, name="x").logits("a"), V, "Named sites are not mapped"),
    Row("ilab.Activations.flat", lambda c: c.acts.flat("blocks.0.nope"), KeyError, "was not collected; these were"),
    Row(
        "ilab.Activations",
        lambda c: ilab.Activations(["a"], torch.zeros(1, 1), torch.ones(1, 1), []).flat("x"),
        KeyError,
        "'x' was not collected",
    ),
    Row(
        "Model.parse_sites",
        lambda c: c.model.parse_sites("blocks.9.hook_resid_post"),
        V,
        r"Unknown site 'blocks\.9\.hook_resid_post'",
    ),
    Row("Model.site_dim", lambda c: c.model.site_dim("resid"), V, "Unknown site 'resid'"),
    Row("Model.site_dim", lambda c: c.model.site_dim("resid_post"), V, r"'resid_post' names 2 sites .*takes one site"),
    Row("Model.parse_site", lambda c: c.model.parse_site("mlp_out"), V, r"'mlp_out' names 2 sites .*takes one site"),
    Row(
        "Model.collect",
        lambda c: c.model.collect(TEXTS, ["resid_post", "resid_psot"]),
        V,
        r"Unknown site 'resid_psot'\. Did you mean resid_post, .*short form meaning every layer: embed, resid_pre",
    ),
    Row(
        "Model.cache",
        lambda c: c.model.cache(TEXTS, "mlp", c.tmp / "c_short", n_tokens=10),
        V,
        r"Unknown site 'mlp'\..*short form meaning every layer:.*mlp_out",
    ),
    Row("Model.envoy", lambda c: c.model.envoy("blocks.1.hook_nothing"), V, "Unknown site"),
    Row(
        "Model.collect",
        lambda c: c.model.collect(TEXTS, ["resid_post", "blocks.1.mlp.hook_expert_ids"]),
        V,
        r"'blocks\.1\.mlp\.hook_expert_ids': model_type 'gpt2' has no mixture-of-experts router.* such as mixtral",
    ),
    Row(
        "Model.parse_sites",
        lambda c: c.model.parse_sites("mixer_out"),
        V,
        r"'mixer_out': model_type 'gpt2' has no state-space mixer.*Mamba and Mamba-2",
    ),
    Row("Model.block", lambda c: c.model.block(99), V, r"layer must be an integer in 0\.\.1, got 99"),
    Row("Model.layer_kinds", lambda c: c.model.layer_kinds(2), V, r"layer must be an integer in 0\.\.1, got 2"),
    Row("Model.to_tokens", lambda c: c.model.to_tokens([""]), V, r"texts\[0\] is empty"),
    Row("Model.to_tokens", lambda c: c.model.to_tokens(" ".join(["the"] * 300)), V, "longer than"),
    Row("Model.to_str_tokens", lambda c: c.model.to_str_tokens([10**9]), V, "Token id 1000000000 is outside"),
    Row("Model.check_token_ids", lambda c: c.model.check_token_ids([0.5]), T, "Token ids must be integers"),
    Row("Model.check_lengths", lambda c: c.model.check_lengths([129]), V, r"129 tokens, longer than .* \(128"),
    Row("Model.collect", lambda c: c.model.collect(TEXTS, sites=None), T, "sites must be a name or a non-empty list"),
    Row(
        "Model.collect",
        lambda c: c.model.collect(TEXTS, SITE, batch_size=2.5),
        V,
        "batch_size must be a positive integer, got 2.5",
    ),
    Row("Model.collect", lambda c: c.model.collect([], SITE), V, "texts is empty"),
    Row("Model.logits", lambda c: c.model.logits(TEXTS, positions=[]), V, "positions is empty"),
    Row("Model.logits", lambda c: c.model.logits(TEXTS, positions=True), T, "positions must be token indices"),
    Row("Model.logits", lambda c: c.model.logits(TEXTS, positions=[50]), V, "Position 50 is outside a text of"),
    Row(
        "Model.logits",
        lambda c: under_budget("100KB", lambda: c.model.logits(TEXTS * 100, positions=None)),
        MemoryBudgetError,
        r"logits on 300 texts of up to 15 tokens would need about .* returned.* over the memory budget of 100.0 KB",
    ),
    Row(
        "Model.collect",
        lambda c: under_budget("1MB", lambda: c.model.collect([LONG] + ["the"] * 400, SITE)),
        MemoryBudgetError,
        r"collect on 401 texts of up to 101 tokens would need about .* \(4.9 MB returned.* padded to the longest",
    ),
    Row(
        "Model.generate",
        lambda c: c.model.generate(TEXTS, max_new_tokens=0),
        V,
        "max_new_tokens must be a positive integer, got 0",
    ),
    Row(
        "Model.generate_ids",
        lambda c: c.model.generate_ids("the", max_new_tokens=200),
        V,
        "the prompt and max_new_tokens is 202 tokens",
    ),
    Row(
        "Model.cache",
        lambda c: c.model.cache(TEXTS, SITE, c.tmp / "c", batch_size=2.5),
        V,
        "batch_size must be a positive integer, got 2.5",
    ),
    Row("Model.cache", lambda c: c.model.cache([""] * 5, SITE, c.tmp / "c2", n_tokens=10), V, "gives no window"),
    Row("Model.cache", lambda c: c.model.cache(TEXTS, SITE, c.tmp / "c3", dtype="int8"), V, "dtype='int8'"),
    Row("Model.batches", lambda c: list(c.model.batches(TEXTS, 0, "x")), V, "batch_size must be a positive integer"),
    Row(
        "Model.run_sites",
        lambda c: c.model.run_sites({"input_ids": torch.ones(1, 2, dtype=torch.long)}, "x"),
        V,
        "Unknown site 'x'",
    ),
    Row(
        "Model.fit_batch",
        lambda c: c.model.fit_batch(4, 10**6, "collect"),
        MemoryBudgetError,
        "collect on one text of 1,000,000 tokens would need",
    ),
    Row("Model.sites_of_width", lambda c: c.model.sites_of_width("wide"), V, "width must be a positive integer"),
    Row(
        "Model.eager_attention",
        lambda c: c.model.eager_attention(needed="yes").__enter__(),
        T,
        "needed must be True or False, got str",
    ),
    Row(
        "Model.cache",
        lambda c: c.model.cache(TEXTS, SITE, None),
        T,
        r"path must be a folder path \(a string or pathlib\.Path\), got NoneType",
    ),
    Row("Model.cache", lambda c: c.model.cache(TEXTS, SITE, 123), T, "path must be a folder path .*got int: 123"),
    Row(
        "Model.cache",
        lambda c: c.model.cache(TEXTS, SITE, a_file(c.tmp)),
        V,
        r"path='.*a-file' is an existing file, not a folder",
    ),
    Row("Model.position_plan", lambda c: c.model.position_plan(TEXTS, 99), V, "Position 99 is outside"),
    # lone surrogates: named before any forward pass (the tokenizer would raise a raw TypeError)
    Row("Model.collect", lambda c: c.model.collect(["the cat", BAD_TEXT], SITE), V, r"texts\[1\] " + NOT_UNICODE),
    Row("Model.logits", lambda c: c.model.logits(BAD_TEXT), V, r"texts\[0\] " + NOT_UNICODE),
    Row("Model.generate", lambda c: c.model.generate([BAD_TEXT]), V, r"texts\[0\] " + NOT_UNICODE),
    Row("Model.to_tokens", lambda c: c.model.to_tokens(BAD_TEXT), V, r"texts\[0\] " + NOT_UNICODE),
    Row(
        "Model.cache",
        lambda c: c.model.cache(["the cat sat", BAD_TEXT], SITE, c.tmp / "bad-unicode", n_tokens=16),
        V,
        "Corpus item 1 " + NOT_UNICODE,
    ),
]

EXEMPT: dict[str, str] = {
    "Model.remote_backend": "the per-request backend the engine builds for a remote model, from its own keywords",
    "Model.forward_bytes": "the estimate behind the memory guards (Model.fit_batch has rows), fed by them",
    "Model.softcap": "applied by the engine to logit tensors it made",
}
