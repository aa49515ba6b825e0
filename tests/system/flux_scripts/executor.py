#!/usr/bin/env python3
# flux style: FluxExecutor futures with event callbacks; a failing and a canceled job
import concurrent.futures
import os
import threading

import fluxes as flux
from fluxes.job import FluxExecutor, JobspecV1


def spec(*command):
    jobspec = JobspecV1.from_command(list(command))
    jobspec.cwd = os.getcwd()
    jobspec.environment = dict(os.environ)
    return jobspec


started = []
cleaned = []
with FluxExecutor() as executor:
    futures = [executor.submit(spec("true")) for _ in range(30)]
    for future in futures:
        future.add_event_callback("start", lambda f, e: started.append(e.name))
        future.add_event_callback("clean", lambda f, e: cleaned.append(f.jobid()))
    failing = executor.submit(spec("sh", "-c", "exit 7"))
    running = threading.Event()
    sleeper = executor.submit(spec("sleep", "60"))
    sleeper.add_event_callback("start", lambda f, e: running.set())
    running.wait(60)
    with flux.Flux() as h:
        flux.job.cancel(h, sleeper.jobid(), "not needed")
    done, _ = concurrent.futures.wait(futures)
    print("results:", sorted({f.result() for f in done}), len(done))
    print("failing result:", failing.result())
    exc = sleeper.exception()
    print("canceled:", type(exc).__name__, exc.type, exc.severity)
    print("jobids distinct:", len({f.jobid() for f in futures}))
    attached = executor.attach(failing.jobid())
    attached.add_event_callback("submit", lambda f, e: started.append("attached"))
    print("attached result:", attached.result(), attached.jobid() == failing.jobid())
print("start callbacks:", started.count("start"), "attached:", started.count("attached"))
print("clean callbacks:", len(cleaned))
with FluxExecutor() as executor:
    print("map:", list(executor.map(lambda code: spec("sh", "-c", f"exit {code}"), [0, 1, 2])))
