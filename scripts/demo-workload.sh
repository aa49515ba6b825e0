#!/bin/sh
# The demo's workload, run inside an instance (scripts/demo starts one for it;
# by hand: fluxes start --nodes 2 -- sh scripts/demo-workload.sh): a 2-node job,
# a failing job, a job chain, a canceled job and 100 simulated jobs; it ends by
# listing the finished jobs. Any step that goes wrong stops it with a non-zero exit.
set -eu
echo "== fluxes run -N2 -n4 hostname"
fluxes run -N2 -n4 -l hostname
echo "== a job that fails (exit 3)"
code=0
fluxes run sh -c "echo about to fail >&2; exit 3" || code=$?
echo "exit code: $code"
test "$code" = 3
echo "== a job chain: second runs after the first succeeds"
first=$(fluxes submit --job-name=first sh -c "sleep 0.5; echo first done")
second=$(fluxes submit --job-name=second --dependency="afterok:$first" echo second done)
fluxes job attach "$second"
echo "== cancel a running sleep"
victim=$(fluxes submit --job-name=victim sleep 100)
fluxes job wait-event -t 30s "$victim" start >/dev/null
fluxes cancel "$victim"
fluxes job wait "$victim" || true
echo "== 100 simulated 10ms jobs"
fluxes submit --cc=1-100 --job-name=sim --setattr=exec.test.run_duration=10ms true >/dev/null
fluxes queue drain --timeout=120s
echo "== fluxes resource list"
fluxes resource list
echo "== fluxes jobs -a --stats"
fluxes jobs -a --stats -c 12
