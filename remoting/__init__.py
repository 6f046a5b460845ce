"""remoting package."""
