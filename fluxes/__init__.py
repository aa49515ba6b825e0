"""fluxes: an event-sourced batch job manager and scheduler on Redis streams.

It implements the Flux resource-manager RFCs (14 jobspec, 20 R, 21 job states,
22 idset, 23 durations, 27 scheduler protocol, 29 hostlists, 31 constraints,
33 queues) with every job transition stored as an event in a Redis stream.
"""

# not typing.TYPE_CHECKING: importing typing would cost every command ~2 ms
# (type checkers treat any constant of this name as true)
TYPE_CHECKING = False
if TYPE_CHECKING:  # the lazy names below, for type checkers
    from fluxes import job as job
    from fluxes.job.handle import Flux as Flux

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``fluxes.Flux`` and ``fluxes.job`` on first use, so that ``import fluxes`` stays
    cheap (the CLI imports this package too)."""
    import importlib

    if name == "Flux":
        from fluxes.job.handle import Flux

        return Flux
    if name == "job":
        return importlib.import_module("fluxes.job")
    raise AttributeError(f"module 'fluxes' has no attribute {name!r}")
