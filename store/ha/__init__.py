"""store ha package."""
