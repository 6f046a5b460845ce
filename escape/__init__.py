"""escape package."""
