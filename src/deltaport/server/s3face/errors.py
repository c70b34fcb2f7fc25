"""The face's errors, rendered as S3's XML ``<Error>`` (what S3 clients parse), the one place."""

from __future__ import annotations

from xml.sax.saxutils import escape

from starlette.responses import Response

#: S3 error codes and their HTTP status.
STATUS = {
    "AccessDenied": 403,
    "AuthorizationHeaderMalformed": 400,
    "ExpiredToken": 400,
    "InvalidAccessKeyId": 403,
    "InvalidArgument": 400,
    "InvalidRange": 416,
    "InvalidToken": 400,
    "MethodNotAllowed": 405,
    "NoSuchBucket": 404,
    "NoSuchKey": 404,
    "RequestTimeTooSkewed": 403,
    "SignatureDoesNotMatch": 403,
}


class S3Error(Exception):
    """An S3 error: ``code`` (a key of :data:`STATUS`) and a message for the client."""

    def __init__(self, code: str, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.headers = code, message, headers or {}

    def response(self, *, head: bool = False, resource: str = "") -> Response:
        body = (
            b""
            if head
            else (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{self.code}</Code><Message>{escape(self.message)}</Message>"
                f"<Resource>{escape(resource)}</Resource></Error>"
            ).encode()
        )
        return Response(body, status_code=STATUS[self.code], media_type="application/xml", headers=self.headers)
