"""Where what is served comes from: the config file (parsed, validated, re-read), the feed that
keeps the server in step with its config file or catalog database, TLS, and the reload line."""
