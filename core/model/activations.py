"""Activations: tokens and per-site tensors collected from a model, in memory.

Example
-------
>>> acts = model.collect(["The cat sat."], sites=["blocks.0.hook_resid_post"])
>>> acts["blocks.0.hook_resid_post"].shape     # [batch, pos, d]
>>> acts.flat("blocks.0.hook_resid_post").shape  # [n_tokens, d], padding dropped
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(repr=False)
class Activations:
    """Token ids, string tokens, a padding mask and one [batch, pos, d] tensor per site.

    Rows are right-padded: ``mask[b, p]`` is True where position ``p`` of text ``b``
    holds a real token.
    """

    texts: list[str]
    tokens: torch.Tensor  # [batch, pos] int64
    mask: torch.Tensor  # [batch, pos] bool
    str_tokens: list[list[str]]
    values: dict[str, torch.Tensor] = field(default_factory=dict)  # site -> [batch, pos, d] ([batch, heads, pos, pos]
    # for attention patterns)
    model_name: str = ""

    @property
    def sites(self) -> list[str]:
        """The sites held, in forward order."""
        return list(self.values)

    @property
    def n_tokens(self) -> int:
        """Number of real (non-padding) tokens."""
        return int(self.mask.sum())

    def __getitem__(self, site: str) -> torch.Tensor:
        try:
            return self.values[site]
        except KeyError:
            raise KeyError(f"Site {site!r} was not collected; these were: {self.sites}") from None

    def __contains__(self, site: object) -> bool:
        return site in self.values

    def __len__(self) -> int:
        return len(self.texts)

    def flat(self, site: str) -> torch.Tensor:
        """The site's activations as [n_tokens, d], padding removed, row-major by text."""
        if site.endswith("attn.hook_pattern"):
            raise ValueError(
                f"{site} is [batch, heads, query, key], not one vector per token: index it per text instead, "
                f"e.g. acts[{site!r}][0, head, :n, :n] for a text of n tokens."
            )
        return self[site][self.mask]

    def flat_tokens(self) -> torch.Tensor:
        """Token ids as [n_tokens], aligned with :meth:`flat`."""
        return self.tokens[self.mask]

    def flat_str_tokens(self) -> list[str]:
        """String tokens aligned with :meth:`flat`."""
        return [t for row in self.str_tokens for t in row]

    def __repr__(self) -> str:
        shapes = ", ".join(f"{s}: {list(v.shape)}" for s, v in self.values.items())
        return f"Activations({len(self)} texts, {self.n_tokens} tokens; {shapes})"


def pad_and_stack(rows: list[torch.Tensor], length: int, value: float | int = 0) -> torch.Tensor:
    """Right-pad each [pos, ...] tensor to ``length`` and stack them into [batch, length, ...]."""
    out = rows[0].new_full((len(rows), length, *rows[0].shape[1:]), value)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def pad_patterns(rows: list[torch.Tensor], length: int) -> torch.Tensor:
    """Zero-pad each [heads, n, n] attention pattern to [heads, length, length] and stack them."""
    out = rows[0].new_zeros((len(rows), rows[0].shape[0], length, length))
    for i, row in enumerate(rows):
        out[i, :, : row.shape[1], : row.shape[2]] = row
    return out
