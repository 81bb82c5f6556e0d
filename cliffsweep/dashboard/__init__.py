"""The live sweep dashboard (issue 41): `cliffsweep dashboard STORE...` and `run --dashboard`.

storage/tablecache.py reads a store's files again only where they changed; views.py turns tables into the
page's JSON (pure); reading.py reads the frontiers as `analyze` does; refresh.py refreshes them in
one background thread; app.py serves them (Starlette, uvicorn) with static/'s page."""
