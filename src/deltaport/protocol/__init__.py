"""The Delta Sharing wire: models, NDJSON lines, capabilities, predicate hints, profiles."""
