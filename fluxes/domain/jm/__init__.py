"""The job manager: pure rules (core) driven by the worker loop."""
