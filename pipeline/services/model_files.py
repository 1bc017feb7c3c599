"""Model weights shipped inside registry packages: where they are, and whether they are
the files we pinned.

Each :class:`ModelPackage` names a package, the files we read from it and their sizes
(and, for a small file whose size alone could match another release's, its SHA-256).
The files are found with ``importlib.util.find_spec``, never by importing the package
(some packages' ``__init__`` imports torch or a framework we do not install), and checked
before use: a truncated or different download fails at start-up with the ``pip install``
line that fixes it, not at a user's first word. The Silero VAD, the end-of-turn model and
the embedded STT, LLM and TTS all use it.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path


class ModelFileError(RuntimeError):
    """A model's file is missing or not the one we pinned (one ``except`` at start-up
    covers every model file)."""


@dataclass(frozen=True, slots=True)
class ModelPackage:
    """A registry package that carries model files, with the sizes we pinned.

    ``entry`` is what the loader is given (a folder or a file), relative to the package
    folder; ``files`` are ``(relative path, bytes)``; ``sha256`` optionally pins files by
    digest too (for a small file whose size alone could match another release's).
    """

    distribution: str
    version: str
    module: str
    entry: str
    files: tuple[tuple[str, int], ...]
    no_deps: bool = False
    sha256: tuple[tuple[str, str], ...] = ()

    @property
    def install_hint(self) -> str:
        flag = "--no-deps " if self.no_deps else ""
        return f"pip install {flag}{self.distribution}=={self.version}"

    @property
    def reinstall_hint(self) -> str:
        """The install line for a package that is installed but whose files are wrong
        (a plain ``pip install`` of the same version would do nothing)."""
        return f"{self.install_hint} --force-reinstall"

    def locate(self, package_dir: Path | None = None) -> Path:
        """The checked path of ``entry``; ``package_dir`` defaults to the installed package."""
        if package_dir is None:
            spec = importlib.util.find_spec(self.module)
            if spec is None or not spec.submodule_search_locations:
                raise ModelFileError(
                    f"the {self.distribution} package is not installed; run `{self.install_hint}`"
                )
            package_dir = Path(spec.submodule_search_locations[0])
        for name, expected in self.files:
            path = package_dir / name
            if not path.is_file():
                raise ModelFileError(f"{path} is missing; reinstall with `{self.reinstall_hint}`")
            size = path.stat().st_size
            if size != expected:
                raise ModelFileError(
                    f"{path} is {size:,} bytes, expected {expected:,} "
                    f"({self.distribution} {self.version}); reinstall with `{self.reinstall_hint}`"
                )
        for name, pinned in self.sha256:
            path = package_dir / name
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != pinned:
                raise ModelFileError(
                    f"{path} has SHA-256 {digest}, expected {pinned}; "
                    f"reinstall with `{self.reinstall_hint}`"
                )
        return package_dir / self.entry
