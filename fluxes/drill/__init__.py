"""Recovery drills: kill workers under load, then check the invariants."""
