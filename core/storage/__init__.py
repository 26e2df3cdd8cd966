"""Files: atomic writes, long jobs that resume (:class:`ResumableJob`) and their checkpoints, validated readers
for files from other people, and the cache folder.

Example
-------
>>> from interplab.core.storage import write_json, read_json
>>> path = write_json(tmp_path / "a.json", {"n": 1})
>>> read_json(path)
{'n': 1}
"""

from .atomic import DiskFullError, atomic_folder, atomic_path, make_dirs, remove, write_bytes, write_json, write_text
from .cache import cache_dir
from .checkpoint import TokenDigest, begin, check_inputs, save_state
from .readers import Fields, FileError, inside, read_json, read_safetensors, safetensors_header
from .resumable import ResumableJob

__all__ = [
    "DiskFullError",
    "Fields",
    "FileError",
    "ResumableJob",
    "TokenDigest",
    "atomic_folder",
    "atomic_path",
    "begin",
    "cache_dir",
    "check_inputs",
    "inside",
    "make_dirs",
    "read_json",
    "read_safetensors",
    "remove",
    "safetensors_header",
    "save_state",
    "write_bytes",
    "write_json",
    "write_text",
]
