# Sourced by scripts/demo and scripts/test: makes a fresh Debian machine ready.
# - installs redis-server, iproute2 (the multi-host test's network namespaces),
#   chromium (the web browser tests), tmux (the fluxes top test) and mpich with
#   libmpich-dev (the MPI tests build their programs with mpicc.mpich) from the
#   OS packages when they are missing
#   (needs root or sudo)
# - creates .venv and installs the locked dependencies (requirements.lock, with
#   hashes) and fluxes itself (editable)
# Re-running is cheap: the pip step is skipped while the lock and pyproject.toml are unchanged.
set -eu
cd "$(dirname "$0")/.."

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else return 1; fi
}

apt_install() {
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 || {
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
    }
}

if ! command -v redis-server >/dev/null 2>&1; then
    echo "setup: installing redis-server from the OS packages" >&2
    apt_install redis-server || echo "setup: could not install redis-server (not root?); tests that need it will skip" >&2
fi

if ! command -v chromium >/dev/null 2>&1; then
    # the browser tests of fluxes web drive Debian's chromium (never a downloaded browser)
    echo "setup: installing chromium from the OS packages" >&2
    apt_install chromium || echo "setup: could not install chromium (not root?); the browser tests will skip" >&2
fi

if ! command -v mpicc.mpich >/dev/null 2>&1; then
    # the MPI system tests build small MPICH programs and run them through the PMI server
    echo "setup: installing mpich and libmpich-dev from the OS packages" >&2
    apt_install mpich libmpich-dev || echo "setup: could not install mpich (not root?); the MPI tests will skip" >&2
fi

if ! command -v ip >/dev/null 2>&1; then
    # the multi-host system test builds hosts from network namespaces
    echo "setup: installing iproute2 from the OS packages" >&2
    apt_install iproute2 || echo "setup: could not install iproute2 (not root?); the multi-host test will skip" >&2
fi

if ! command -v tmux >/dev/null 2>&1; then
    # the system test of fluxes top drives it in a tmux pane
    echo "setup: installing tmux from the OS packages" >&2
    apt_install tmux || echo "setup: could not install tmux (not root?); the fluxes top test will skip" >&2
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    "$PY" -m venv .venv 2>/dev/null || { apt_install python3-venv && "$PY" -m venv .venv; }
fi

# Exactly the versions CI tested: requirements.lock (hashes checked), then the
# project itself without resolving anything (scripts/lock refreshes the lock).
# The stamp holds the checksum of both files, so any change to either re-installs.
stamp=.venv/.fluxes-installed
want=$(cat requirements.lock pyproject.toml | cksum)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing fluxes and its locked dependencies into .venv" >&2
    if ! { .venv/bin/python -m pip install -q --require-hashes -r requirements.lock &&
           .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .; } >.venv/install.log 2>&1; then
        cat .venv/install.log >&2
        echo "setup: installing the Python packages failed (log above)" >&2
        exit 1
    fi
    echo "$want" >"$stamp"
fi
PATH="$PWD/.venv/bin:$PATH"
export PATH
