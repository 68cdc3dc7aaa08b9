"""The package list for setuptools (the rest of the configuration is in pyproject.toml):
every package under engine/ and tui/, installed as mmuscope.engine and mmuscope.tui, and
`mmuscope.tui.theme_files`, which pyproject maps to the repository's top-level themes/ so
the built-in themes ship inside the wheel."""

from setuptools import find_namespace_packages, setup

# namespace packages too: engine/scenarios/data holds the scenario files (package data)
found = find_namespace_packages(include=["engine*", "tui*"], exclude=["*.__pycache__"])
setup(packages=[f"mmuscope.{name}" for name in found] + ["mmuscope.tui.theme_files"])
