"""Schema revisions of the catalog database, oldest first: 0001_initial, ..."""
