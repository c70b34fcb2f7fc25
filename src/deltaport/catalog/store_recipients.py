"""Recipients and their tokens in the catalog database: creation, rotation and the one-time
activation of a link.

Secrets: an activation token and a bearer token are made here (``secrets.token_urlsafe``), handed
back to the caller once, and stored only as SHA-256 digests; no message names one. So that the
admin API can show a pending link again, the caller may give a :data:`Seal`: what it returns for
the activation token (encrypted; this module never sees a key) is kept with the token until the
link is used (then it is emptied).

Token lifecycle: a token starts *pending* (only its activation link exists, valid until
``activation_expires_at``); :func:`activate` turns it into a bearer token exactly once. Its
``expiration_time`` starts as the recipient's; rotation only ever brings expiries closer, never
further.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from deltaport.catalog import db
from deltaport.catalog.model import RecipientInfo, RecipientToken
from deltaport.catalog.names import check_name, name_key
from deltaport.catalog.store_sql import BIGINT_MAX, insert_row, one_row, write_unique
from deltaport.catalog.store_types import Tx
from deltaport.errors import AlreadyExists, InvalidParameter, PermissionDenied, ResourceNotFound

_R, _K = db.recipients, db.recipient_tokens
BEARER_PREFIX = "dpt_"
ACTIVATION_PREFIX = "dpa_"
_NEW_LINK = "ask the data provider for a new activation link"

#: ``seal(token id, activation token)``: the bytes to keep so that the link can be shown again
#: (the activation token encrypted, bound to its token id).
Seal = Callable[[str, str], bytes]


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


# --- validation -----------------------------------------------------------------------------------


def _check_expiration(tx: Tx, who: str, expiration_time: object) -> int | None:
    if expiration_time is None:
        return None
    if not isinstance(expiration_time, int) or isinstance(expiration_time, bool):
        raise InvalidParameter(
            f"expiration_time of recipient '{who}' must be epoch milliseconds, not {expiration_time!r}"
        )
    if expiration_time <= tx.now_ms:
        raise InvalidParameter(f"expiration_time of recipient '{who}' is in the past: give a future time (epoch ms)")
    if expiration_time > BIGINT_MAX:
        raise InvalidParameter(f"expiration_time of recipient '{who}' is beyond {BIGINT_MAX}: give epoch milliseconds")
    return expiration_time


def _check_ips(who: str, addresses: Iterable[str]) -> list[str]:
    out = []
    for address in addresses:
        try:
            ipaddress.ip_network(str(address).strip(), strict=False)
        except ValueError:
            raise InvalidParameter(
                f"allowed IP address {address!r} of recipient '{who}' is not an IP address or CIDR range "
                "(e.g. 10.0.0.0/8, 2001:db8::/32)"
            ) from None
        out.append(str(address).strip())
    return out


def _check_properties(who: str, properties: Mapping[str, str] | None) -> dict[str, str]:
    out = {}
    for key, value in (properties or {}).items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise InvalidParameter(
                f"property {key!r} of recipient '{who}' is invalid: keys must be non-empty strings, values strings"
            )
        out[key] = value
    return out


# --- rows to values -------------------------------------------------------------------------------


def _token(row: Row[Any]) -> RecipientToken:
    return RecipientToken(
        id=row.token_id,
        created_at=row.created_at,
        expiration_time=row.expiration_time,
        token_hash=row.token_hash,
        activation_hash=row.activation_hash,
        activation_expires_at=row.activation_expires_at,
        activated_at=row.activated_at,
        activation_sealed=row.activation_sealed,
    )


def _recipient(row: Row[Any], tokens: Iterable[Row[Any]]) -> RecipientInfo:
    return RecipientInfo(
        name=row.name,
        comment=row.comment,
        authentication_type=row.authentication_type,
        expiration_time=row.expiration_time,
        allowed_ip_addresses=tuple(row.allowed_ip_addresses),
        properties=dict(row.properties),
        tokens=tuple(_token(t) for t in tokens),
        id=row.recipient_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def recipient_row(tx: Tx, name: str) -> Row[Any]:
    check_name(name, "recipient", allow_dot=True)
    query = sa.select(_R).where(_R.c.name_lc == name_key(name))
    return one_row(tx, query, f"recipient '{name}' does not exist: create it first or check the name")


def _info(tx: Tx, row: Row[Any]) -> RecipientInfo:
    tokens = tx.conn.execute(sa.select(_K).where(_K.c.recipient_ref == row.id).order_by(_K.c.id)).all()
    return _recipient(row, tokens)


def get_recipient(tx: Tx, name: str) -> RecipientInfo:
    return _info(tx, recipient_row(tx, name))


def list_recipients(tx: Tx) -> list[RecipientInfo]:
    """Every recipient with its tokens, in two queries, sorted by name without regard to case."""
    tokens: dict[int, list[Row[Any]]] = {}
    for token in tx.conn.execute(sa.select(_K).order_by(_K.c.id)):
        tokens.setdefault(token.recipient_ref, []).append(token)
    rows = sorted(tx.conn.execute(sa.select(_R)).all(), key=lambda r: r.name_lc)
    return [_recipient(row, tokens.get(row.id, ())) for row in rows]


# --- tokens ---------------------------------------------------------------------------------------


def _add_pending_token(
    tx: Tx, recipient_ref: int, expiration_time: int | None, activation_ttl_ms: int, seal: Seal | None
) -> str:
    """A new pending token of the recipient; returns its activation token (kept only sealed)."""
    activation = ACTIVATION_PREFIX + secrets.token_urlsafe(32)
    token_id = str(uuid.uuid4())
    values = dict(
        recipient_ref=recipient_ref,
        token_id=token_id,
        created_at=tx.now_ms,
        expiration_time=expiration_time,
        activation_hash=digest(activation),
        activation_expires_at=tx.now_ms + activation_ttl_ms,
        activation_sealed=seal(token_id, activation) if seal is not None else None,
    )
    insert_row(tx, _K, values, "a new token could not be stored: try again")
    return activation


def create_recipient(
    tx: Tx,
    name: str,
    *,
    comment: str | None,
    authentication_type: str,
    expiration_time: int | None,
    allowed_ip_addresses: Iterable[str],
    properties: Mapping[str, str] | None,
    activation_ttl_ms: int,
    token_digests: Iterable[bytes] | None = None,
    seal: Seal | None = None,
) -> tuple[RecipientInfo, str | None]:
    """A new TOKEN recipient with one pending token; returns it and that token's activation token.
    With ``token_digests`` (bearer tokens known only by their SHA-256 digests, as a config file
    holds them) it gets those tokens, activated, instead, and no link (None)."""
    check_name(name, "recipient", allow_dot=True)
    if not isinstance(authentication_type, str) or authentication_type.upper() != "TOKEN":
        raise InvalidParameter(f"authentication_type {authentication_type!r} is not supported: use TOKEN")
    conflict = f"recipient '{name}' already exists: choose another name or update it"
    if tx.conn.execute(sa.select(_R.c.id).where(_R.c.name_lc == name_key(name))).first() is not None:
        raise AlreadyExists(conflict)
    expires = _check_expiration(tx, name, expiration_time)
    values = dict(
        recipient_id=str(uuid.uuid4()),
        name=name,
        name_lc=name_key(name),
        comment=comment,
        authentication_type="TOKEN",
        expiration_time=expires,
        allowed_ip_addresses=_check_ips(name, allowed_ip_addresses),
        properties=_check_properties(name, properties),
        created_at=tx.now_ms,
        updated_at=tx.now_ms,
    )
    ref = insert_row(tx, _R, values, conflict)
    if token_digests is None:
        activation = _add_pending_token(tx, ref, expires, activation_ttl_ms, seal)  # before the recipient is read
        return get_recipient(tx, name), activation
    for token_hash in token_digests:
        _add_known_token(tx, ref, token_hash, expires)
    return get_recipient(tx, name), None


def _add_known_token(tx: Tx, recipient_ref: int, token_hash: bytes, expiration_time: int | None) -> None:
    if not isinstance(token_hash, bytes) or len(token_hash) != 32:
        raise InvalidParameter("a token digest must be the 32 bytes of a SHA-256 digest")
    values = dict(
        recipient_ref=recipient_ref,
        token_id=str(uuid.uuid4()),
        created_at=tx.now_ms,
        expiration_time=expiration_time,
        token_hash=token_hash,
        activated_at=tx.now_ms,
    )
    insert_row(tx, _K, values, "this token is another recipient's already: give each recipient its own tokens")


def _rename(tx: Tx, row: Row[Any], new_name: str) -> dict[str, str]:
    check_name(new_name, "recipient", allow_dot=True)
    taken = sa.select(_R.c.id).where(_R.c.name_lc == name_key(new_name), _R.c.id != row.id)
    if tx.conn.execute(taken).first() is not None:
        raise AlreadyExists(f"recipient '{new_name}' already exists: choose another name")
    return {"name": new_name, "name_lc": name_key(new_name)}


def _set_token_expiry(tx: Tx, row: Row[Any], new: int) -> None:
    """Unexpired tokens that followed the recipient's old expiration_time take the new one; the
    others (brought forward by a rotation) keep theirs unless the new one is sooner: a rotated-out
    token is never revived."""
    mine = _K.c.recipient_ref == row.id
    live = sa.or_(_K.c.expiration_time.is_(None), _K.c.expiration_time > tx.now_ms)
    followed = (
        _K.c.expiration_time.is_(None) if row.expiration_time is None else _K.c.expiration_time == row.expiration_time
    )
    tx.conn.execute(sa.update(_K).where(mine, live, followed).values(expiration_time=new))
    tx.conn.execute(sa.update(_K).where(mine, _K.c.expiration_time > new).values(expiration_time=new))


def update_recipient(
    tx: Tx,
    name: str,
    *,
    new_name: str | None,
    comment: str | None,
    expiration_time: int | None,
    allowed_ip_addresses: Iterable[str] | None,
    properties: Mapping[str, str] | None,
) -> RecipientInfo:
    """Each argument that is not None replaces the recipient's value; a new expiration_time applies
    to its live tokens too (see :func:`_set_token_expiry`)."""
    row = recipient_row(tx, name)
    values: dict[str, Any] = {"updated_at": tx.now_ms}
    if new_name is not None:
        values.update(_rename(tx, row, new_name))
    if comment is not None:
        values["comment"] = comment
    if allowed_ip_addresses is not None:
        values["allowed_ip_addresses"] = _check_ips(row.name, allowed_ip_addresses)
    if properties is not None:
        values["properties"] = _check_properties(row.name, properties)
    if expiration_time is not None:
        values["expiration_time"] = _check_expiration(tx, row.name, expiration_time)
        _set_token_expiry(tx, row, expiration_time)
    conflict = f"recipient '{values.get('name', row.name)}' already exists: choose another name"
    write_unique(tx, sa.update(_R).where(_R.c.id == row.id).values(**values), conflict)
    return get_recipient(tx, values.get("name", row.name))


def delete_recipient(tx: Tx, name: str) -> None:
    """The recipient goes with its tokens and grants (foreign-key cascades)."""
    tx.conn.execute(sa.delete(_R).where(_R.c.id == recipient_row(tx, name).id))


def rotate_token(
    tx: Tx, name: str, existing_token_expire_in_seconds: int, activation_ttl_ms: int, *, seal: Seal | None = None
) -> tuple[RecipientInfo, str]:
    """Every token's expiry (and every pending link's) becomes the sooner of its own and now + N s;
    a new pending token expiring with the recipient is added. Returns its activation token."""
    seconds = existing_token_expire_in_seconds
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
        raise InvalidParameter(
            f"existing_token_expire_in_seconds must be a whole number of seconds, 0 or more (0: now), not {seconds!r}"
        )
    if tx.now_ms + seconds * 1000 > BIGINT_MAX:
        raise InvalidParameter(
            f"existing_token_expire_in_seconds {seconds} is too far in the future: give at most "
            f"{(BIGINT_MAX - tx.now_ms) // 1000} seconds"
        )
    row = recipient_row(tx, name)
    if row.expiration_time is not None and row.expiration_time <= tx.now_ms:
        raise InvalidParameter(f"recipient '{row.name}' has expired: give it a new expiration_time before rotating")
    cutoff = tx.now_ms + seconds * 1000
    mine = _K.c.recipient_ref == row.id
    later = sa.or_(_K.c.expiration_time.is_(None), _K.c.expiration_time > cutoff)
    tx.conn.execute(sa.update(_K).where(mine, later).values(expiration_time=cutoff))
    pending = sa.and_(_K.c.activated_at.is_(None), _K.c.activation_expires_at > cutoff)
    tx.conn.execute(sa.update(_K).where(mine, pending).values(activation_expires_at=cutoff))
    activation = _add_pending_token(tx, row.id, row.expiration_time, activation_ttl_ms, seal)
    tx.conn.execute(sa.update(_R).where(_R.c.id == row.id).values(updated_at=tx.now_ms))
    return get_recipient(tx, row.name), activation


def pending_token(tx: Tx, activation_token: str) -> Row[Any]:
    """The token row of a usable activation link: ResourceNotFound when no link has that token,
    PermissionDenied when it was used or has expired (the link's or the token's expiry)."""
    token = None
    if isinstance(activation_token, str) and activation_token:
        query = sa.select(_K).where(_K.c.activation_hash == digest(activation_token))
        token = tx.conn.execute(query).first()
    if token is None:
        raise ResourceNotFound(f"this activation link is not known: {_NEW_LINK}")
    if token.activated_at is not None:
        raise PermissionDenied(f"this activation link has been used already: {_NEW_LINK}")
    expired = token.expiration_time is not None and token.expiration_time <= tx.now_ms
    if expired or (token.activation_expires_at is not None and token.activation_expires_at <= tx.now_ms):
        raise PermissionDenied(f"this activation link has expired: {_NEW_LINK}")
    return token


def activate(tx: Tx, activation_token: str) -> tuple[RecipientInfo, str, int | None]:
    """The link's token made a bearer token: (recipient, the bearer token, its expiry in epoch ms).
    Exactly once per link, whatever the concurrency: the UPDATE only applies while the token is
    still unactivated, and only the call that changed the row wins."""
    token = pending_token(tx, activation_token)
    bearer = BEARER_PREFIX + secrets.token_urlsafe(32)
    won = tx.conn.execute(
        sa.update(_K)
        .where(_K.c.id == token.id, _K.c.activated_at.is_(None))
        .values(activated_at=tx.now_ms, token_hash=digest(bearer), activation_sealed=None)
    )
    if won.rowcount != 1:
        raise PermissionDenied(f"this activation link has been used already: {_NEW_LINK}")
    row = tx.conn.execute(sa.select(_R).where(_R.c.id == token.recipient_ref)).one()
    return _info(tx, row), bearer, token.expiration_time
