# SPDX-License-Identifier: Apache-2.0
"""Packaging facts that need no GPU: one version source, typing marker."""

import pathlib
import re

import openmla

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_comes_from_cmake_project():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(openmla VERSION ([0-9]+\.[0-9]+\.[0-9]+)", cmake)
    assert match, "CMakeLists.txt: project(openmla VERSION x.y.z) not found"
    assert openmla.__version__ == match.group(1)


def test_package_is_typed():
    assert (ROOT / "python" / "openmla" / "py.typed").is_file()
