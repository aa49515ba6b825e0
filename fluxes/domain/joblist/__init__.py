"""The job-list read model: job summaries and counters folded from the journal."""
