"""The researcher API (DRF, token auth) under /api/researcher/. Annotator endpoints are not part of it."""
