"""The dashboard: one blueprint per page module."""
