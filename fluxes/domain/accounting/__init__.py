"""Accounting, pure: banks and associations (an admin event fold), usage folded from the
journal with half-life decay, the fair-share tree, the multi-factor priority plugin and
the per-association and per-bank limits. See ``docs/accounting.md``."""
