"""What a training call asks for, checked before any work: its settings and SAE specs, the sites to read from
its source, and the SAEs it creates.

Example
-------
>>> specs, sites, dims = plan_training(activation_source(store), [dict(arch="topk", k=32)], None, 10_000, 4096)
>>> sae = create_sae(specs[0], dims, "gemma-3-270m", seed=0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...checks import check_float, check_int, check_positive_int
from ...data.sources import ActivationSource
from ...memory.budget import check_memory
from ..base import SAE, arch_class
from ..config import SAEConfig

#: The settings an SAE spec may give.
#: The largest learning rate a spec may ask for (Adam steps above 1 diverge on any SAE).
MAX_LR = 1.0

SPEC_KEYS = {
    "arch",
    "width",
    "k",
    "l1_coefficient",
    "l0_coefficient",
    "site",
    "lr",
    "apply_b_dec_to_input",
    "site_out",
    "skip",
    "matryoshka_widths",
}


def check_spec(spec: dict[str, Any], default_site: str | None, sites: Sequence[str]) -> dict[str, Any]:
    """``spec`` with its architecture's defaults and its site, checked (settings, sites, the architecture's own
    rules, ``lr``) before any work."""
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ValueError(f"Unknown SAE settings {sorted(unknown)}; valid ones are {sorted(SPEC_KEYS)}.")
    arch = spec.get("arch", "batchtopk")
    cls = arch_class(arch)
    spec = cls.with_defaults({**spec, "arch": arch})
    spec.setdefault("width", 4096)
    spec.setdefault("site", default_site)
    if spec["site"] not in sites:
        raise ValueError(f"site={spec['site']!r} is not available from this source; it has {list(sites)}.")
    if spec.get("site_out") is not None and spec["site_out"] not in sites:
        raise ValueError(f"site_out={spec['site_out']!r} is not available from this source; it has {list(sites)}.")
    settings: dict[str, Any] = {
        k: spec[k]
        for k in ("k", "l1_coefficient", "l0_coefficient", "site_out", "skip", "matryoshka_widths")
        if k in spec
    }
    if spec.get("site_out"):
        settings["apply_b_dec_to_input"] = spec.get("apply_b_dec_to_input", False)
    cls.validate(SAEConfig(arch=arch, d_in=1, d_sae=spec["width"], **settings))
    if "lr" in spec:  # Adam's step: above 1 every run diverges
        check_float("lr", spec["lr"], maximum=MAX_LR, above=0)
    return spec


def check_settings(
    specs: Any, batch_size: int, checkpoint_every: int, seed: int, dead_tokens: int | None,
    resample_every: int | None,
) -> None:  # fmt: skip
    """The settings of a training call that need nothing else, and ``specs`` a list of dicts."""
    check_positive_int("batch_size", batch_size)
    check_positive_int("checkpoint_every", checkpoint_every)
    check_int("seed", seed, minimum=0)
    for name, value in (("dead_tokens", dead_tokens), ("resample_every", resample_every)):
        if value is not None:
            check_positive_int(name, value)
    if isinstance(specs, dict) or not isinstance(specs, Sequence) or not all(isinstance(x, dict) for x in specs):
        raise TypeError(f"specs must be a list of dicts, e.g. [dict(arch='topk', k=32)], got {specs!r:.100}.")


def plan_training(
    source: ActivationSource, specs: Sequence[dict[str, Any]], site: str | None, n_tokens: int, batch_size: int
) -> tuple[list[dict[str, Any]], list[str], dict[str, int]]:
    """The checked specs, the sites to read (in the source's order) and every site's width; refusals before work."""
    wanted = [site] if site else []
    wanted += [s["site"] for s in specs if s.get("site")] + [s["site_out"] for s in specs if s.get("site_out")]
    available = source.sites_for(wanted)
    dims = {s: source.site_dim(s) for s in available}
    default_site = site or (available[0] if len(available) == 1 else None)
    if default_site is None and any("site" not in spec for spec in specs):
        raise ValueError(f"This source holds several sites; pass site= (or a site per spec), one of {available}.")
    if not specs:
        raise ValueError("Give at least one SAE spec, e.g. dict(arch='batchtopk', width=4096, k=32).")
    checked = [check_spec(s, default_site, available) for s in specs]
    # after the specs: a wrong architecture or k is the error to see first
    check_int(f"n_tokens (at least one batch: >= batch_size={batch_size})", n_tokens, minimum=batch_size)
    if source.n_tokens is not None and source.n_tokens < batch_size:
        raise ValueError(f"The store holds {source.n_tokens} tokens, fewer than one batch of {batch_size}.")
    check_memory(f"Training {len(checked)} SAE(s)", sum(
        4 * (4 * (2 * dims[sp["site"]] + 3) * sp["width"] + 3 * batch_size * (sp["width"] + dims[sp["site"]]))
        for sp in checked), "Train fewer or narrower SAEs at once, or use a smaller batch_size.")  # fmt: skip
    outs = {s["site_out"] for s in checked if s.get("site_out")}  # a transcoder's output: from the same pass
    return checked, sorted({s["site"] for s in checked} | outs, key=available.index), dims


def create_sae(spec: dict[str, Any], dims: dict[str, int], model_name: str, seed: int) -> SAE:
    """A freshly initialised SAE (or transcoder) of ``spec``."""
    extra: dict[str, Any] = {
        k: spec[k]
        for k in ("k", "l1_coefficient", "l0_coefficient", "apply_b_dec_to_input", "skip", "matryoshka_widths")
        if k in spec
    }
    if spec.get("site_out"):
        extra.update(site_out=spec["site_out"], d_out=dims[spec["site_out"]])
    sae = SAE.create(spec["arch"], d_in=dims[spec["site"]], d_sae=spec["width"], site=spec["site"],
                     model_name=model_name, **extra)  # fmt: skip
    sae.init_weights(seed)
    return sae
