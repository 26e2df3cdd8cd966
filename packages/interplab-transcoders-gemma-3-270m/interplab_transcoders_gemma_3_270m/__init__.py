"""The transcoders interplab trained for the embedded Gemma 3 270M:
one BatchTopK transcoder per layer (hook_mlp_in to hook_mlp_out), in SAELens folders, and (from 0.1.1) one
cross-layer transcoder over every layer, in circuit-tracer's layout.

Example
-------
>>> from interplab_transcoders_gemma_3_270m import FOLDER
>>> sorted(p.name for p in FOLDER.iterdir())[:1]
"""

from pathlib import Path

#: The folder of SAELens folders (each a ``cfg.json`` and ``sae_weights.safetensors``) and the README.
FOLDER = Path(__file__).parent / "gemma-3-270m-transcoders"

#: The cross-layer transcoder's folder (``config.json``, ``W_enc_L`` and ``W_dec_L`` safetensors) and its README.
CLT_FOLDER = Path(__file__).parent / "gemma-3-270m-clt"
