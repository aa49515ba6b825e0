"""Worker processes of fluxes: ingest, job manager, scheduler, exec, job list.

Each worker is stateless: it rebuilds what it needs by replaying Redis streams.
"""
