"""The fast paths. Each module says which slow path it is the fast form of, and where the test is
that holds the two equal."""
