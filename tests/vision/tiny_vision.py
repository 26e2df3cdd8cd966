"""Tiny randomly initialised CLIP and ViT models for the vision tests (built in milliseconds)."""

from __future__ import annotations

import torch
from transformers import CLIPConfig, CLIPModel, ViTConfig, ViTForImageClassification

IMAGE = 16  # pixels a side
PATCH = 4  # 16 patches + the class token


def tiny_clip(seed: int = 0) -> CLIPModel:
    """A two-layer CLIP with 4 heads, width 32, 16x16 images in 4x4 patches, a text tower over 40 ids."""
    torch.manual_seed(seed)
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=40,
                max_position_embeddings=16, bos_token_id=0, eos_token_id=2, pad_token_id=1)  # fmt: skip
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, image_size=IMAGE,
                  patch_size=PATCH)  # fmt: skip
    return CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=24)).eval()


def tiny_vit(seed: int = 0) -> ViTForImageClassification:
    """A two-layer ViT classifier over 3 labels, same image and patch sizes."""
    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       image_size=IMAGE, patch_size=PATCH, num_labels=3)  # fmt: skip
    return ViTForImageClassification(config).eval()


def images(n: int = 3, seed: int = 1) -> torch.Tensor:
    """``n`` random images [n, 3, IMAGE, IMAGE]."""
    return torch.randn(n, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(seed))
