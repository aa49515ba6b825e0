"""Execution of jobs on their ranks: the pure rules the exec worker follows.

:mod:`~fluxes.domain.exec.layout` places tasks and builds their environment;
:mod:`~fluxes.domain.exec.intake` decodes requests and encodes reports (the
only module that knows the messages); :mod:`~fluxes.domain.exec.jobs`,
:mod:`~fluxes.domain.exec.table`, :mod:`~fluxes.domain.exec.timers`,
:mod:`~fluxes.domain.exec.output`, :mod:`~fluxes.domain.exec.outbox`,
:mod:`~fluxes.domain.exec.records` and :mod:`~fluxes.domain.exec.adoption`
hold the job state and what moves it.  The loop is :mod:`workers.exec`;
processes and files are :mod:`fluxes.proc.tasks`, :mod:`fluxes.proc.exec_files`
and :mod:`fluxes.proc.adopt`; Redis is :mod:`fluxes.store.exec_streams`.  See
``docs/exec.md``.
"""
