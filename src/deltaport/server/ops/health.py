"""``GET /health``: whether the server answers. Anyone may ask, so it names nothing served."""

from __future__ import annotations

from deltaport.server.routing import RouteTable

router = RouteTable()


@router.get("/health", tags=["server"])
async def health() -> dict[str, str]:
    return {"status": "ok"}
