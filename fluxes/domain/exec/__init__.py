"""Execution of jobs on their ranks: the pure rules the exec worker follows.

:mod:`fluxes.domain.exec.layout` decides which task ranks run on which execution
rank and which cores and GPUs they get, builds each task's environment,
expands output path templates and reads the shell-related parts of a
jobspec.  The worker that starts and watches processes is
:mod:`workers.exec`; see ``docs/exec.md``.
"""
