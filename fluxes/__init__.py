"""fluxes: an event-sourced batch job manager and scheduler on Redis streams.

It implements the Flux resource-manager RFCs (14 jobspec, 20 R, 21 job states,
22 idset, 23 durations, 27 scheduler protocol, 29 hostlists, 31 constraints,
33 queues) with every job transition stored as an event in a Redis stream.
"""

__version__ = "0.1.0"
