"""The validation contract for every file interplab reads: check first, allocate after, name the field.

Files come from other people (a shared SAE, a dashboard folder, a store on a cluster), so every
reader follows the same rules:

1. **Headers before data.** :func:`safetensors_header`, :func:`npy_header` and :func:`npz_headers`
   read names, dtypes and shapes without reading the arrays, check them against the file size (a
   header cannot promise more data than the file holds) and against the memory budget
   (:func:`interplab.core.memory.budget.check_memory`); only then are arrays read. Object arrays (pickles)
   are refused.
2. **Types and shapes checked against each other.** JSON goes through :class:`Fields` (exact types:
   ``8.9`` is not an int, ``"8"`` is not a number, a missing key is named), arrays through
   :func:`expect_arrays` (every name there, each dtype and shape as the config says).
3. **Paths stay inside.** A path read from a file is resolved with :func:`inside`: never absolute,
   never out of the folder the file came from (``..``, symlinks pointing out).
4. **Errors name the file and the field** (:class:`FileError`, a ``ValueError``).

Example
-------
>>> raw = Fields(path / "cfg.json", read_json(path / "cfg.json"))
>>> d_sae = raw.int("d_sae", minimum=1)
>>> header = safetensors_header(path / "sae_weights.safetensors")
>>> expect_arrays(header.file, header.tensors, {"W_enc": ((640, d_sae), FLOATS)})
"""

from .arrays import (
    FLOATS,
    ArrayInfo,
    SafetensorsHeader,
    dtype_name,
    expect_arrays,
    load_npy,
    load_npz,
    npy_header,
    npz_headers,
    read_safetensors,
    result_header,
    safetensors_header,
)
from .errors import FileError, describe_value
from .json_fields import MAX_JSON_BYTES, MAX_JSON_DEPTH, Fields, json_depth, parse_json, read_json
from .paths import in_folder, inside
from .values import expect_values

__all__ = [
    "FLOATS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "ArrayInfo",
    "Fields",
    "FileError",
    "SafetensorsHeader",
    "describe_value",
    "dtype_name",
    "expect_arrays",
    "expect_values",
    "in_folder",
    "inside",
    "json_depth",
    "load_npy",
    "load_npz",
    "npy_header",
    "npz_headers",
    "parse_json",
    "read_json",
    "read_safetensors",
    "result_header",
    "safetensors_header",
]
