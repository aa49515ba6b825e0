#!/usr/bin/env python3
# flux style: submit jobspecs asynchronously with .then(), run the reactor, wait for all
import os
import sys

import fluxes as flux
from fluxes import job

h = flux.Flux()
jobs: list = []


def submit_cb(f, arg):
    jobs.append((arg, job.submit_get_id(f)))


jobspec = job.JobspecV1.from_command(["true"])
jobspec.cwd = os.getcwd()
jobspec.environment = dict(os.environ)
total = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for i in range(total):
    job.submit_async(h, jobspec.dumps(), waitable=True).then(submit_cb, i)
if h.reactor_run() < 0:
    h.fatal_error("reactor start failed")
print(f"submitted {len(jobs)}")
print(f"distinct ids {len({jobid for _, jobid in jobs})}")
ok = 0
for _ in range(total):
    jobid, success, errstr = job.wait(h)
    ok += success
print(f"completed {total} ok {ok}")
