"""The ingest's rules, pure: what a block of user requests is, how its submit requests are
checked, and where its control requests go (the worker, ``workers/ingest.py``, reads and
commits; :mod:`fluxes.store.ingest` holds its Redis calls)."""
