"""The application services: what the command line and the web server both do.

``fluxes/cli/`` and ``fluxes/web/`` are two doors to one set of operations:
list jobs as rows, read and change queue states, drain and undrain nodes,
report usage, read a user's times and names. Those live here, once, and both
doors call them; the doors keep only their own concerns (argument parsing and
printing; HTTP, sessions and pages). A service takes an
:class:`~fluxes.store.instance.Instance`, reads and writes through the store's
named methods (no raw Redis here either), and reports a refusal as
:class:`ValueError` or :class:`~fluxes.errors.FluxesError` with a one-line
message each door shows its own way.

Layers (docs/architecture.md): the service layer sits under cli and web and over
store, domain and formats; it never imports cli, web or workers
(tests/unit/test_layers.py).
"""
