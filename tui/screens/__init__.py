"""Screens of the explorer: one per MMU mechanism, plus dialogs."""
