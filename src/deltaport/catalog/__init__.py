"""The provider's catalog: what is shared with whom, as values (model, served) and, in a database,
with its schema migrations (store)."""
