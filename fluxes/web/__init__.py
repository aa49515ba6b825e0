"""``fluxes web``: the machine, the queues and a job's life in a browser, at any moment.

An entrypoint like ``workers/`` and ``fluxes/cli/``: it reads through
``fluxes/store`` and never talks to the workers (docs/web.md).
"""
