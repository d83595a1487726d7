"""Python code for berth.extender.v1, generated from the .proto at run time.

Nothing generated is committed: the first run compiles
``proto/berth/extender/v1/extender.proto`` with ``grpc_tools.protoc`` (the
protoc that grpcio-tools ships as a Python extension) into a cache directory,
and later runs import what is there. The cache is keyed by a hash of the
.proto and of the grpcio-tools and protobuf versions, so editing the protocol
or upgrading either package regenerates it.

Several processes may start at once (the end-to-end tests start extenders in
parallel): each generates into a private temporary directory and renames it
into place; a process that loses the race uses the winner's copy.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.resources
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
#: The repository's proto/ directory (extenders/python/ -> the root).
DEFAULT_PROTO_DIR = HERE.parent.parent / "proto"


def _default_cache_dir() -> Path:
    """The user's cache directory, never the source tree:
    ``$XDG_CACHE_HOME/berth/python-extender``, else
    ``~/.cache/berth/python-extender``, else (no home) the temporary
    directory. The cache key keeps checkouts and versions apart."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "berth" / "python-extender"
    try:
        return Path.home() / ".cache" / "berth" / "python-extender"
    except RuntimeError:
        return Path(tempfile.gettempdir()) / "berth-python-extender"


#: Where generated code is cached (``--gen-dir`` chooses another place).
DEFAULT_CACHE_DIR = _default_cache_dir()
#: The protocol file, relative to the proto directory.
PROTO_FILE = "berth/extender/v1/extender.proto"
#: The generated modules.
PB2_MODULE = "berth.extender.v1.extender_pb2"
PB2_GRPC_MODULE = "berth.extender.v1.extender_pb2_grpc"


class CodegenError(RuntimeError):
    """The protocol's Python code could not be generated or imported."""


@dataclass(frozen=True)
class Protocol:
    """The generated modules of berth.extender.v1."""

    #: Messages and enums (``extender_pb2``).
    pb2: ModuleType
    #: The service stubs and the servicer registration (``extender_pb2_grpc``).
    pb2_grpc: ModuleType
    #: The directory the modules were imported from.
    root: Path


def _cache_key(proto: bytes) -> str:
    """A hash of what the generated code depends on."""
    h = hashlib.sha256(proto)
    for package in ("grpcio-tools", "protobuf"):
        try:
            h.update(f"{package}={importlib.metadata.version(package)}".encode())
        except importlib.metadata.PackageNotFoundError as e:
            raise CodegenError(
                f"{package} is not installed: pip install -r {HERE / 'requirements.txt'}"
            ) from e
    return h.hexdigest()[:16]


def _generate(proto_dir: Path, out: Path) -> None:
    """Runs protoc on the protocol file, writing modules under ``out``."""
    try:
        from grpc_tools import protoc  # noqa: PLC0415 (only needed here)
    except ImportError as e:
        raise CodegenError(
            f"grpcio-tools is not installed: pip install -r {HERE / 'requirements.txt'}"
        ) from e
    # The well-known types (google/protobuf/duration.proto) ship with
    # grpcio-tools.
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={proto_dir}",
        f"--proto_path={well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        str(proto_dir / PROTO_FILE),
    ]
    code = protoc.main(args)
    if code != 0:
        raise CodegenError(f"protoc failed (exit {code}) on {proto_dir / PROTO_FILE}")


def generate(proto_dir: Path = DEFAULT_PROTO_DIR, cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """Generates the code if the cache lacks it; returns the directory to import from."""
    proto_path = proto_dir / PROTO_FILE
    try:
        proto = proto_path.read_bytes()
    except OSError as e:
        raise CodegenError(f"cannot read the protocol file {proto_path}: {e}") from e
    target = cache_dir / _cache_key(proto)
    marker = target / "berth" / "extender" / "v1" / "extender_pb2_grpc.py"
    if marker.is_file():
        return target
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide it from other users
    except OSError as e:
        raise CodegenError(f"cannot create the code cache {cache_dir}: {e}") from e
    try:
        _generate(proto_dir, tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process renamed its copy into place first.
            if not marker.is_file():
                raise
    except OSError as e:
        raise CodegenError(f"cannot write generated code to {target}: {e}") from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def load(proto_dir: Path = DEFAULT_PROTO_DIR, cache_dir: Path = DEFAULT_CACHE_DIR) -> Protocol:
    """Generates (if needed) and imports the berth.extender.v1 modules."""
    root = generate(proto_dir, cache_dir)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        pb2 = importlib.import_module(PB2_MODULE)
        pb2_grpc = importlib.import_module(PB2_GRPC_MODULE)
    except ImportError as e:
        raise CodegenError(f"cannot import the generated code from {root}: {e}") from e
    return Protocol(pb2=pb2, pb2_grpc=pb2_grpc, root=root)
