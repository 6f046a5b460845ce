"""container package."""
