"""Start a real, private PostgreSQL for the demo and for tests when no URL is given.

Uses the binaries the ``pgserver`` package ships when it is installed, else a system
PostgreSQL (``/usr/lib/postgresql/<ver>/bin`` or ``pg_ctl`` on PATH); ``DEEPAGENTS_PG_BIN``
overrides both. The server listens on loopback on a free port, trusts local connections,
and lives in a temporary directory that ``close()`` removes. ``stop()``/``start()`` restart
the same cluster (tests use them to simulate an outage). PostgreSQL refuses to run as
root, so under root the server runs as the ``postgres`` (or ``nobody``) system user.

For the demo::

    with database_if_needed(settings) as url:
        await migrate(url, settings.audit_schema)
        ...  # run workers with DEEPAGENTS_OUTBOX=true and an AuditWriter(dsn=url)
        await show_task_trail(url, settings.audit_schema, task_id)
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from deepagents.config import Settings
from deepagents.errors import ConfigError

_SYSTEM_BINS = Path("/usr/lib/postgresql")
# A throwaway cluster need not survive an OS crash (fsync off), but it must survive its
# own crash: never synchronous_commit=off, which acks commits a server crash then loses.
_FAST = ("-c", "fsync=off", "-c", "full_page_writes=off")


def postgres_bin_dir() -> Path:
    override = os.environ.get("DEEPAGENTS_PG_BIN")
    candidates: list[Path] = [Path(override)] if override else []
    # Locate pgserver's binaries without importing it: its import has side effects
    # (a lock file under XDG_RUNTIME_DIR, warnings) that a library must not trigger.
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    if _SYSTEM_BINS.is_dir():
        versions = sorted(_SYSTEM_BINS.iterdir(), key=lambda p: _version_key(p.name), reverse=True)
        candidates.extend(v / "bin" for v in versions)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    raise ConfigError(
        "no PostgreSQL binaries found: install `pgserver` (pip) or PostgreSQL, "
        "or set DEEPAGENTS_DATABASE_URL",
        file="environment",
    )


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in name.split(".") if p.isdigit())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise ConfigError("running as root and no unprivileged user (postgres, nobody) exists")


def _traversable(path: Path) -> bool:
    """Whether any user can reach ``path`` (every directory on the way has o+x)."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


_COPIES: dict[Path, Path] = {}


def _world_readable_copy(bin_dir: Path) -> Path:
    """Under root, the server runs as an unprivileged user who cannot enter, say, a venv
    under /root: copy the installation (bin, lib, share) where it can, once per process."""
    if bin_dir not in _COPIES:
        target = Path(tempfile.mkdtemp(prefix="deepagents-pgbin-"))
        atexit.register(shutil.rmtree, target, True)
        target.chmod(0o755)
        install, package = bin_dir.parent, bin_dir.parents[1]
        shutil.copytree(install, target / package.name / install.name, symlinks=True)
        # Wheels (auditwheel) find their bundled libraries through an RPATH relative to
        # the binary ($ORIGIN/../../../<package>.libs): keep that layout.
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, target / libs.name, symlinks=True)
        _COPIES[bin_dir] = target / package.name / install.name / bin_dir.name
    return _COPIES[bin_dir]


class EmbeddedPostgres:
    """A throwaway PostgreSQL cluster; use as a context manager and read ``.url``."""

    def __init__(
        self, *, bin_dir: Path | None = None, fast: bool = True, root: Path | None = None
    ) -> None:
        """``root``: the directory to create the cluster's own directory in (the system's
        temporary directory by default)."""
        self._user = _run_as()
        self._root = root
        self.bin_dir = bin_dir or postgres_bin_dir()
        if self._user is not None and not _traversable(self.bin_dir):
            self.bin_dir = _world_readable_copy(self.bin_dir)
        self.fast = fast
        self.port = 0
        self.dir: Path | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        if self.dir is None:
            raise RuntimeError("EmbeddedPostgres is not initialised; call open() first")
        return self.dir / "data"

    def open(self) -> EmbeddedPostgres:
        """Create the cluster and start it."""
        self.dir = Path(tempfile.mkdtemp(prefix="deepagents-pg-", dir=self._root))
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._pg(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip
        self.port = _free_port()
        self.start()
        return self

    def start(self, timeout: float = 30.0) -> None:
        options = f"-p {self.port} -h 127.0.0.1 -k {self.dir}"
        extra = " ".join(_FAST) if self.fast else ""
        self._pg(
            "pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"),
            "-w", "-t", str(int(timeout)), "-o", f"{options} {extra}".strip(), "start",
        )  # fmt: skip
        self._wait_listening(timeout)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``mode="immediate"`` is a crash-like stop (no checkpoint)."""
        if self.dir is not None and (self.data / "postmaster.pid").exists():
            self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        if self.dir is None:
            return
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> EmbeddedPostgres:
        return self.open()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _pg(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        subprocess.run(  # noqa: S603 - fixed binary, arguments we built
            command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            user=self._user, cwd=self.dir, timeout=60,
        )  # fmt: skip

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.02)
        raise ConfigError(f"embedded PostgreSQL did not listen on port {self.port} in {timeout} s")


@contextlib.contextmanager
def database_if_needed(settings: Settings) -> Iterator[str]:
    """Yield a PostgreSQL URL: ``DEEPAGENTS_DATABASE_URL``, or an embedded server's for
    this process (stopped and removed on exit). Run ``migrate(url, schema)`` on it next."""
    if settings.database_url is not None:
        yield settings.database_url.get_secret_value()
        return
    with EmbeddedPostgres() as server:
        yield server.url
