"""The wheel's package list, found by walking the tree: ``interplab/`` as ``interplab``, ``core/`` as
``interplab.core`` and ``widgets/`` as ``interplab.widgets``. A new subpackage is in the wheel with no
edit here or in ``pyproject.toml``; data folders (``widgets/js/<widget>/``, ``core/evals/data``) travel as
namespace packages with their files. The weights under ``core/saes/pretrained`` are not part of the
library: ``packages/`` builds them into their own data packages.
"""

from setuptools import find_namespace_packages, setup

ROOTS = {"interplab": "interplab", "interplab.core": "core", "interplab.widgets": "widgets"}
LEFT_OUT = ["pretrained", "pretrained.*", "*.pretrained", "*.pretrained.*", "*__pycache__*"]


def packages() -> list[str]:
    """Every package and data folder below the three roots, under its installed name."""
    found = []
    for name, folder in ROOTS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=LEFT_OUT)]
    return found


setup(
    packages=packages(),
    package_dir=ROOTS,
    package_data={"": ["*.js", "*.css", "*.json", "py.typed"]},
    include_package_data=False,
)
