"""Environment variable names and defaults every part of fluxes agrees on (no imports)."""

#: The instance a client talks to (set by ``fluxes start`` for its command).
ENV_URI = "FLUXES_URI"
#: A Redis URL to use when no instance URI is given.
ENV_REDIS_URL = "FLUXES_REDIS_URL"
#: Key namespace of an instance unless told otherwise.
DEFAULT_NAMESPACE = "fx"
