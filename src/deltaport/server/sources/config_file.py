"""A config file with ``shares``, served as a catalog: re-read when it changes, and shown read-only
through the admin API.

:class:`ConfigFileSource` is a feed source (catalog_feed.py): its revision is a digest of the
file's bytes, so any edit is seen at the next poll (or at once on SIGHUP), and a file that does not
load (broken YAML, an unknown key, a grant of a missing share) leaves the last good catalog
serving. An edit changes the settings declared ``reload=True`` (config.py: the shares, recipients
and ``authorization`` served); every other setting (addresses, TLS, secrets) is read at start
only, which the log says, naming its key, when such a setting changed.

:class:`ConfigCatalogView` is what the admin API reads for such a server: the file's shares and
recipients imported into a scratch SQLite database (catalog/import_served.py), rebuilt on each
reload and swapped in whole. Writes are refused with a message naming the file.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from deltaport.catalog.import_served import import_served
from deltaport.catalog.store import CatalogDB
from deltaport.server.sources.config import SETTINGS, ConfigError, ServerConfig, load_config

log = logging.getLogger("deltaport.server")

#: The settings an edit of the config file changes only when the server restarts.
_AT_START = tuple(s for s in SETTINGS if not s.reload)


@dataclass(frozen=True)
class LoadedConfig:
    config: ServerConfig
    revision: str


class ConfigFileSource:
    def __init__(self, path: str) -> None:
        self.path = path

    def _bytes(self) -> bytes:
        try:
            return Path(self.path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the config file {self.path}: {exc.strerror}") from None

    def revision(self) -> str:
        return hashlib.sha256(self._bytes()).hexdigest()

    def served(self) -> LoadedConfig:
        revision = self.revision()
        return LoadedConfig(load_config(self.path), revision)


def restart_needed(old: ServerConfig, new: ServerConfig) -> list[str]:
    """The config keys in which ``new`` differs from ``old`` that take effect only on restart."""
    return [s.key for s in _AT_START if getattr(old, s.attr) != getattr(new, s.attr)]


class _Swappable:
    """A catalog database whose target is replaced whole (each reader call sees one or the other)."""

    def __init__(self, db: CatalogDB, path: Path) -> None:
        self.db, self.path = db, path

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


class ConfigCatalogView:
    """The config file's shares and recipients as a catalog database, for the admin API to read."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="deltaport-config-catalog-")
        self._count = 0
        self._lock = threading.Lock()
        self._current = _Swappable(*self._new_db())

    @property
    def catalog(self) -> CatalogDB:
        return cast(CatalogDB, self._current)

    def _new_db(self) -> tuple[CatalogDB, Path]:
        self._count += 1
        path = Path(self._dir) / f"view-{self._count}.db"
        return CatalogDB(f"sqlite:///{path}"), path

    def refresh(self, config: ServerConfig) -> None:
        """Rebuild the view from ``config``; on failure the old view stays (logged)."""
        with self._lock:
            db, path = self._new_db()
            try:
                import_served(db, config.shares, config.recipients, config.bearer_token_hash)
            except Exception as exc:
                db.close()
                path.unlink(missing_ok=True)
                log.error("the admin API's view of the config file was not refreshed: %s", exc)
                return
            old, old_path = self._current.db, self._current.path
            self._current.db, self._current.path = db, path
            old.close()
            old_path.unlink(missing_ok=True)

    def close(self) -> None:
        self._current.db.close()
        shutil.rmtree(self._dir, ignore_errors=True)
