"""Paths read from data never leave their folder (core/storage/readers/paths.py)."""

from __future__ import annotations

import pytest
from interplab.core.storage.readers import FileError, inside


def test_paths_in_data_never_leave_their_folder(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    assert inside(folder, "labels.json", folder / "meta.json", "labels") == folder / "labels.json"
    for bad in ("../x.json", "/etc/passwd", "a/../../x", "", None):
        with pytest.raises(FileError, match="labels"):
            inside(folder, bad, folder / "meta.json", "labels")
    (folder / "link").symlink_to(tmp_path)
    with pytest.raises(FileError, match="points outside"):
        inside(folder, "link/secret", folder / "meta.json", "labels")
