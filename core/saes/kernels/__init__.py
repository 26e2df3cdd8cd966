"""Fast SAE training kernels: a dense encoder-decoder step and a sparse one for top-k codes.

Example
-------
>>> from interplab.core.saes.kernels import dense, sparse
"""
