"""Pure model of a job: RFC 21 states, events, and the state machine (no I/O)."""
