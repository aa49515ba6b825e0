#!/usr/bin/env python3
# flux style: watch a job's events, wait for one event, read its result
import os

import fluxes as flux
from fluxes.job import JobspecV1

h = flux.Flux()
jobspec = JobspecV1.from_command(["sh", "-c", "exit 5"])
jobspec.cwd = os.getcwd()
jobspec.environment = dict(os.environ)
jobid = flux.job.submit(h, jobspec)
event = flux.job.event_wait(h, jobid, "start")
print("start event:", event.name)
names = []
for event in flux.job.event_watch(h, jobid):
    names.append(event.name)
    if event.name == "finish":
        print("finish status:", event.context["status"] >> 8)
print("first:", names[0], "last:", names[-1])
info = flux.job.result(h, jobid)
print("result:", info.result, "returncode:", info.returncode)
watch = flux.job.event_watch_async(h, jobid)
seen = []


def cb(future, arg):
    event = future.get_event()
    if event is not None:
        seen.append(event.name)


watch.then(cb, None)
h.reactor_run()
print("async saw clean:", "clean" in seen)
listed = flux.job.JobList(h, ids=[jobid]).jobs()[0]
print("listed:", listed.result, listed.name)
print("in my job list:", jobid in [job["id"] for job in flux.job.job_list(h).get_jobs()])
print("jobid forms agree:", flux.job.JobID(jobid.f58) == flux.job.JobID(jobid.dec) == jobid)
try:
    flux.job.result(h, 12345)
except OSError as exc:
    print("unknown job errno:", exc.errno)
try:
    JobspecV1.from_command(["true"], num_tasks=0)
except ValueError:
    print("bad jobspec: ValueError")
