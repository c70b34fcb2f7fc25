"""The reload line: what changed in what is served, by name, never a token."""

from __future__ import annotations

from deltaport.catalog.served import RecipientConfig, SchemaConfig, ShareConfig, SharedTableConfig, TokenHash
from deltaport.server.sources.reload_summary import describe_reload


def _share(name: str, location: str = "/t") -> ShareConfig:
    return ShareConfig(name, (SchemaConfig("d", (SharedTableConfig("t", location),)),))


def _recipient(name: str, *shares: str, token: bytes = b"x" * 32) -> RecipientConfig:
    return RecipientConfig(name, (TokenHash(token),), shares)


def test_nothing_changed_says_nothing():
    same = ((_share("a"),), (_recipient("r", "a"),), None)
    assert describe_reload(same, same) is None


def test_many_names_are_counted_beyond_five():
    old = ((), (), None)
    new = (tuple(_share(f"s{i}") for i in range(7)), (), None)
    assert describe_reload(old, new) == (
        "shares +7 (s0, s1, s2, s3, s4, …); tables +7 (s0.d.t, s1.d.t, s2.d.t, s3.d.t, s4.d.t, …)"
    )


def test_a_moved_table_a_new_token_and_the_bearer_token_are_changes():
    old = ((_share("a", "/old"),), (_recipient("r", "a"),), b"1" * 32)
    new = ((_share("a", "/new"),), (_recipient("r", "a", token=b"y" * 32),), None)
    said = describe_reload(old, new)
    assert said == "tables ~1 (a.d.t); recipients ~1 (r); authorization bearer token removed"
    assert "yyyy" not in said and "1111" not in said


def test_a_shares_own_fields_and_a_tables_access_are_changes():
    import dataclasses

    old = ((_share("a"),), (), None)
    share = _share("a")
    for changed in (
        dataclasses.replace(share, display_name="A"),
        dataclasses.replace(share, comment="about a"),
        dataclasses.replace(share, properties={"owner": "sales"}),
    ):
        assert describe_reload(old, ((changed,), (), None)) == "shares ~1 (a)"
    table = dataclasses.replace(share.schemas[0].tables[0], access_modes=("url", "dir"))
    moved = dataclasses.replace(share, schemas=(SchemaConfig("d", (table,)),))
    assert describe_reload(old, ((moved,), (), None)) == "tables ~1 (a.d.t)"
    aux = dataclasses.replace(table, access_modes=("url",), auxiliary_locations=("s3://b/aux",))
    assert describe_reload(old, ((dataclasses.replace(share, schemas=(SchemaConfig("d", (aux,)),)),), (), None)) == (
        "tables ~1 (a.d.t)"
    )
