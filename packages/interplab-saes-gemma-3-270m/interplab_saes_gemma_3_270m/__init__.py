"""The SAE suite interplab trained for the embedded Gemma 3 270M:
BatchTopK SAEs of width 4096 on blocks.{0,3,6,9,12,15}.hook_resid_post, in SAELens folders.

Example
-------
>>> from interplab_saes_gemma_3_270m import FOLDER
>>> sorted(p.name for p in FOLDER.iterdir())[:1]
"""

from pathlib import Path

#: The folder of SAELens folders (each a ``cfg.json`` and ``sae_weights.safetensors``) and the README.
FOLDER = Path(__file__).parent / "gemma-3-270m"
