"""The event log: sequencing, group commit, and waking readers."""
