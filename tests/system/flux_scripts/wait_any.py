#!/usr/bin/env python3
# flux style: submit waitable jobs (one fails), then wait for any of them
import os
import sys

import fluxes as flux
from fluxes.job import JobspecV1

h = flux.Flux()
njobs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
ids = {}
for i in range(njobs):
    command = ["sh", "-c", "exit 3"] if i == 0 else ["true"]
    jobspec = JobspecV1.from_command(command=command, num_tasks=1, cores_per_task=1)
    jobspec.cwd = os.getcwd()
    jobspec.environment = dict(os.environ)
    jobid = flux.job.submit(h, jobspec, waitable=True)
    ids[jobid] = i
for _ in range(njobs):
    jobid, success, errstr = flux.job.wait(h)
    if success:
        print(f"wait: {ids[jobid]} Success")
    else:
        print(f"wait: {ids[jobid]} Error: {errstr.decode()}")
try:
    flux.job.wait(h)
except OSError as exc:
    print("no more waitable jobs:", exc.errno)
