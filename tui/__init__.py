"""mmuscope's command line and Textual app (the engine is the `engine` package)."""

__version__ = "0.1.0"
