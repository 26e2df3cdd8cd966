"""Bad inputs of ilab.SAE: each row one bad call and the error it must give.

Gathered with every other capability's by ``tests/contracts/test_bad_input.py``, which also checks that
every public function has a row here or an ``EXEMPT`` entry with its reason.
"""

from __future__ import annotations

import torch
from interplab.core.memory.budget import MemoryBudgetError

import interplab as ilab
from tests.contracts.rows import I, Row, T, V

ROWS: list[Row] = [
    Row(
        "ilab.SAE",
        lambda c: ilab.SAE.create("relu2", d_in=4, d_sae=4),
        V,
        r"Unknown SAE architecture 'relu2'; choose one of",
    ),
    Row(
        "ilab.SAE.create",
        lambda c: ilab.SAE.create("topk", d_in=640, d_sae=10**12, k=4),
        MemoryBudgetError,
        "width=1,000,000,000,000 would need",
    ),
    Row(
        "ilab.SAE.create",
        lambda c: ilab.SAE.create("standard", d_in=4, d_sae=4, l1_coefficient=float("nan")),
        V,
        "l1_coefficient must be finite, got nan",
    ),
    Row(
        "ilab.SAE.create",
        lambda c: ilab.SAE.create("topk", d_in=4, d_sae=4, k=9),
        V,
        r"k of a topk SAE of width=4 must be an integer in 1\.\.4, got 9",
    ),
    Row("ilab.train_sae", lambda c: ilab.train_sae(c.store, batch_size=0), V, "batch_size must be a positive integer"),
    Row(
        "ilab.train_sae",
        lambda c: ilab.train_sae(c.store, arch="jumprelu", l0=float("inf")),
        V,
        "l0_coefficient must be finite, got inf",
    ),
    Row("ilab.train_sae", lambda c: ilab.train_sae(torch.zeros(3)), T, "source must be an ActivationStore"),
    Row(
        "ilab.train_saes",
        lambda c: ilab.train_saes(c.store, [{"arch": "topk", "widht": 4}]),
        V,
        r"Unknown SAE settings \['widht'\]",
    ),
    Row(
        "ilab.train_saes",
        lambda c: ilab.train_saes(c.store, {"arch": "topk"}),
        T,
        "specs must be a list of dicts",
    ),
    Row("ilab.load_sae", lambda c: ilab.load_sae(c.tmp / "no-sae"), FileNotFoundError, "No SAE at"),
    Row("ilab.load_sae", lambda c: ilab.load_sae("embedded", layer=7), V, r"No embedded SAE for layer=7"),
    Row(
        "ilab.load_sae",
        lambda c: ilab.load_sae("gemma-scope-2-270m-pt-rez", "layer_5_width_16k_l0_small"),
        V,
        r"Unknown SAE release 'gemma-scope-2-270m-pt-rez'\. Did you mean 'gemma-scope-2-270m-pt-res",
    ),
    Row(
        "ilab.load_sae",
        lambda c: ilab.load_sae("gemma-scope-2-270m-pt-res", "layer_6_width_16k_l0_small"),
        V,
        r"no SAE id 'layer_6_width_16k_l0_small'\. Did you mean .*'layer_5_width_16k_l0_small'",
    ),
    Row(
        "ilab.load_sae",
        lambda c: ilab.load_sae("gemma-scope-2-270m-pt-res"),
        V,
        r"'gemma-scope-2-270m-pt-res' is a SAELens release: give one of its .* SAE ids too",
    ),
    Row("ilab.load_sae", lambda c: ilab.load_sae("embedded", layer=6, site="x"), V, "site='x' is for a local path"),
    Row("ilab.load_sae", lambda c: ilab.load_sae(c.tmp / "s", layer=6), V, "layer=6 is for 'embedded', not for a path"),
    Row("ilab.load_sae", lambda c: ilab.load_sae(42), T, "path_or_name must be a path, .* got int"),
    Row(
        "ilab.SAE.save",
        lambda c: c.sae.save(c.tmp / "s", dtype="float32"),
        T,
        "dtype must be a floating torch dtype .*got 'float32'",
    ),
    Row("ilab.SAE.direction", lambda c: c.sae.direction(24), I, r"Latent 24 is out of range: latents are 0\.\.23"),
    Row("ilab.SAE.direction", lambda c: c.sae.direction("3"), T, "A latent id is an integer, got str"),
    Row("ilab.SAE.encode", lambda c: c.sae.encode(torch.zeros(2, 5)), V, r"reads d_in=32 .*got last dim 5"),
    Row("ilab.SAE.decode", lambda c: c.sae.decode(torch.zeros(2, 5)), V, "has 24 latents; decode got .* last dim 5"),
    Row("ilab.SAE.pre_acts", lambda c: c.sae.pre_acts(torch.zeros(1, 3)), V, "got last dim 3"),
    Row("ilab.SAE.forward", lambda c: c.sae(torch.zeros(1, 3)), V, "got last dim 3"),
    Row("ilab.SAE.training_loss", lambda c: c.sae.training_loss(torch.zeros(2, 3)), V, "got last dim 3"),
    Row(
        "ilab.SAE.check_fits",
        lambda c: c.sae.check_fits(c.model, "blocks.7.hook_resid_post"),
        V,
        r"reads 'blocks\.7\.hook_resid_post', which .* does not have",
    ),
    Row(
        "ilab.SAE.validate",
        lambda c: type(c.sae).validate(ilab.core.saes.SAEConfig("topk", 0, 4, k=1)),
        V,
        "d_in must be a positive integer, got 0",
    ),
    Row(
        "ilab.SAE.target_of",
        lambda c: c.sae.target_of(torch.zeros(2, 32), torch.zeros(2, 5)),
        V,
        r"target must have shape \[2, 32\]",
    ),
    Row(
        "ilab.SAE.trace_params",
        lambda c: c.sae.trace_params(latents=[99]),
        I,
        r"Latent 99 is out of range: latents are 0\.\.23",
    ),
    Row(
        "ilab.train_sae",
        lambda c: ilab.train_sae(c.store, arch="topk", width=8, k=2, lr=1e6),
        V,
        r"lr must be a number > 0 and <= 1\.0, got 1000000\.0",
    ),
    Row("ilab.load_sae", lambda c: ilab.load_sae(None), T, "path_or_name must be a path, 'embedded' or a SAELens"),
    Row(
        "ilab.load_sae",
        lambda c: ilab.load_sae("embedded", layer=6.0),
        T,
        r"layer must be an integer, one of \[.*\]; got float: 6\.0",
    ),
]

EXEMPT: dict[str, str] = {
    "ilab.SAE.with_defaults": "an architecture hook: training specs pass through _check_spec (train_sae has rows)",
    "ilab.SAE.tensor_shapes": "an architecture hook fed checked sizes by SAE.validate and the file readers",
    "ilab.SAE.skip_out": "the skip term forward adds after encode checked x (SAE.forward has rows)",
    "ilab.SAE.file_shapes": "tensor_shapes for a config SAE.validate or the file readers checked",
    "ilab.SAE.load_extra": "an architecture hook fed by the validated file readers (load_sae has rows)",
    "ilab.SAE.init_weights": "seed: any integer torch accepts; called by SAE.create and the trainer",
    "ilab.SAE.fold_input_scale": "called by the trainer with the scale it measured",
}
