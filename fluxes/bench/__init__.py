"""Benchmarks behind ``fluxes bench``: they print figures and never assert."""
