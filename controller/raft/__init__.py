"""controller raft package."""
