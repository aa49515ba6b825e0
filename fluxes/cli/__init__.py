"""The ``fluxes`` command line: one wrapper, one module per command group."""
