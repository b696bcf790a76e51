"""What the package promises matches what is tested: the pinned requirements satisfy the
extras they stand for, every supported Python has its JAX pin, and the README's table of
supported versions names the versions the suites run with."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re

import pytest
from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.path.join(ROOT, "python")


def read(*path: str) -> str:
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def requirements(name: str) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in read("python", name).splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("-r")]


def extra(name: str) -> list[Requirement]:
    """An optional-dependency list of pyproject.toml (tomllib is not in Python 3.10)."""
    m = re.search(rf"^{re.escape(name)} = (\[.*\])$", read("python", "pyproject.toml"), re.M)
    assert m, f"no extra {name!r} in python/pyproject.toml"
    return [Requirement(r) for r in ast.literal_eval(m.group(1))]


def supported_pythons() -> list[str]:
    return re.findall(r'"Programming Language :: Python :: (3\.\d+)"', read("python", "pyproject.toml"))


def pin(r: Requirement) -> str:
    (spec,) = r.specifier
    assert spec.operator == "==", r
    return spec.version


@pytest.mark.parametrize(("pins", "extra_name"), [("requirements-nvrtc13.txt", "nvrtc"), ("requirements-nvrtc12.txt", "nvrtc-cu12")])
def test_the_tested_nvrtc_pins_satisfy_their_extra(pins: str, extra_name: str) -> None:
    pinned = {r.name: pin(r) for r in requirements(pins)}
    wanted = {r.name: r.specifier for r in extra(extra_name)}
    assert set(pinned) == set(wanted), (pinned, wanted)
    for name, version in pinned.items():
        assert wanted[name].contains(version), f"{name}=={version} does not satisfy the extra's {wanted[name]}"


def test_every_supported_python_has_its_jax_pin() -> None:
    """One JAX pin per Python from 3.11 (none for 3.10: its last JAX is too old)."""
    pythons = supported_pythons()
    assert pythons[0] == "3.10" and 'requires-python = ">=3.10"' in read("python", "pyproject.toml")
    jax = [r for r in requirements("requirements-jax.txt") if r.name == "jax"]
    (test_jax,) = extra("test-jax")
    for version in pythons:
        applies = [r for r in jax if r.marker is None or r.marker.evaluate({"python_version": version})]
        assert len(applies) == (0 if version == "3.10" else 1), f"Python {version}: {applies}"
        assert bool(applies) == (test_jax.marker is None or test_jax.marker.evaluate({"python_version": version, "extra": "test-jax"}))
        for r in applies:
            assert test_jax.specifier.contains(pin(r)), (r, test_jax)


def test_ci_runs_the_oldest_and_the_newest_python() -> None:
    run = read(".ci", "run")
    pythons = supported_pythons()
    assert f"find_python {pythons[0]}" in run and f"find_python {pythons[-1]}" in run


def test_the_readme_states_the_tested_versions() -> None:
    readme = read("README.md")
    table = readme[readme.index("## Supported versions") :]
    table = table[: table.index("\n## ")]
    pythons = supported_pythons()
    assert f"{pythons[0]} – {pythons[-1]}" in table
    toolchain = re.search(r'channel = "([^"]+)"', read("rust-toolchain.toml"))
    assert toolchain and toolchain.group(1) in table
    for pins in ("requirements-nvrtc13.txt", "requirements-nvrtc12.txt"):
        for r in requirements(pins):
            assert pin(r) in table, f"{r} is not in the README's table"
    (jax_row,) = [line for line in table.splitlines() if line.startswith("| JAX")]
    for version in pythons[1:]:
        (jax,) = [r for r in requirements("requirements-jax.txt") if r.name == "jax" and r.marker is not None and r.marker.evaluate({"python_version": version})]
        assert pin(jax) in jax_row and version in jax_row, (version, pin(jax), jax_row)


def test_license_files_exist_and_ship_in_the_packages() -> None:
    for name in ("LICENSE-MIT", "LICENSE-APACHE"):
        assert os.path.getsize(os.path.join(ROOT, name)) > 1000
        for package in ("cai-runtime", "cai-macros", "python"):
            assert os.path.samefile(os.path.join(ROOT, package, name), os.path.join(ROOT, name)), package
    assert 'license = "MIT OR Apache-2.0"' in read("Cargo.toml")
    assert "example.invalid" not in read("Cargo.toml")


def test_the_installed_package_carries_the_license_files() -> None:
    """The wheel pip installed (here by maturin) declares and holds both license files."""
    dist = importlib.metadata.distribution("caijit")
    assert dist.metadata["License"] == "MIT OR Apache-2.0"
    assert sorted(dist.metadata.get_all("License-File") or []) == ["LICENSE-APACHE", "LICENSE-MIT"]
    held = {p.name: p for p in dist.files or [] if p.name.startswith("LICENSE-")}
    assert set(held) == {"LICENSE-APACHE", "LICENSE-MIT"}
    assert "Apache License" in held["LICENSE-APACHE"].read_text() and "MIT License" in held["LICENSE-MIT"].read_text()
