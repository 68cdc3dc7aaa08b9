"""Widgets of the explorer, grouped by feature."""
