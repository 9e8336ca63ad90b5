"""A stand-in module named `cute` for tests/frontend_cases.py (annotations only)."""
