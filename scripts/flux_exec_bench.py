"""Flux's side of `fluxes bench executor`: run as `flux start -s1 /usr/bin/python3 scripts/flux_exec_bench.py N`

N `true` jobs through flux's FluxExecutor, a start callback each, the results awaited;
prints jobs/s from the first submit to the last result (the same workload and figure).
"""
import concurrent.futures, os, sys, time
import flux
from flux.job import FluxExecutor, JobspecV1
n = int(sys.argv[1]) if len(sys.argv) > 1 else 102
spec = JobspecV1.from_command(["true"])
spec.environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
spec.cwd = os.getcwd()
started = [0]
def on_start(f, e): started[0] += 1
cpu0 = time.process_time()
with FluxExecutor() as ex:
    t0 = time.perf_counter()
    futs = [ex.submit(spec).add_event_callback("start", on_start) for _ in range(n)]
    done, _ = concurrent.futures.wait(futs)
    el = time.perf_counter() - t0
print(f"flux: jobs={n} completed={len(done)} exit_0={sum(1 for f in done if f.result()==0)} starts={started[0]} seconds={el:.3f} jobs_per_s={len(done)/max(el,1e-9):.1f} client_cpu_ms_per_job={1000*(time.process_time()-cpu0)/max(n,1):.3f}")
