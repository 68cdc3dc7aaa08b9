"""The threads' claims as tables: each model measured beside the thread's own numbers."""
