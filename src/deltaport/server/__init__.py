"""The Delta Sharing server: config, auth and grants, the protocol's endpoints, streaming."""

from deltaport.server.ops.audit import AuditLog, AuditSink, JsonLinesAuditSink
from deltaport.server.sources.config import ServerConfig, load_config, parse_config

__all__ = [
    "AuditLog",
    "AuditSink",
    "JsonLinesAuditSink",
    "ServerConfig",
    "create_app",
    "load_config",
    "parse_config",
]


def create_app(config: ServerConfig, **kwargs):
    from deltaport.server.app import create_app as _create

    return _create(config, **kwargs)
