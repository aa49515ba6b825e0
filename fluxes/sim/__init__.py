"""``fluxes simulate``: a workload replayed through the scheduler's own code in virtual time.

An entrypoint-level tool, like :mod:`fluxes.bench` and :mod:`fluxes.drill`: it
imports the pure layers (formats, domain, messages), never Redis.

* :mod:`fluxes.sim.swf`: the Standard Workload Format, read and written;
* :mod:`fluxes.sim.workload`: the machine and the jobs (from SWF or a journal);
* :mod:`fluxes.sim.journal`: the journal export format (read, replayed, written);
* :mod:`fluxes.sim.drive`: the one adapter to the ingest, job manager and scheduler;
* :mod:`fluxes.sim.engine`: the discrete-event loop and the exec model;
* :mod:`fluxes.sim.invariants`: the checks every run ends with;
* :mod:`fluxes.sim.metrics`: the report's figures; :mod:`fluxes.sim.plots`: its plots;
* :mod:`fluxes.sim.synth`: seeded synthetic traces (tests and ``fluxes bench simulate``);
* :mod:`fluxes.sim.run`: loading, running and writing, end to end (the CLI's and the
  benchmark's entry).

See ``docs/simulate.md``.
"""
