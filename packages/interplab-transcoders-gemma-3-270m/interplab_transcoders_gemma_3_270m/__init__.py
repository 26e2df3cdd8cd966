"""The transcoders interplab trained for the embedded Gemma 3 270M:
one BatchTopK transcoder per layer (hook_mlp_in to hook_mlp_out), in SAELens folders.

Example
-------
>>> from interplab_transcoders_gemma_3_270m import FOLDER
>>> sorted(p.name for p in FOLDER.iterdir())[:1]
"""

from pathlib import Path

#: The folder of SAELens folders (each a ``cfg.json`` and ``sae_weights.safetensors``) and the README.
FOLDER = Path(__file__).parent / "gemma-3-270m-transcoders"
