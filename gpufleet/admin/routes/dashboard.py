"""The dashboard: one page and its assets, shipped in the package (nothing from the internet).

The page itself needs no token; it asks for one and calls the API with it, so what it shows is
what the token's user may see.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

router = APIRouter(tags=["dashboard"], include_in_schema=False)


@router.get("/")
def index() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")
