"""Directory access to local tables: a read-only S3-compatible face (routes.py) and the temporary
credentials it accepts (credentials.py)."""
