"""The run folder on disk: its file names, its writer lock, atomic writes."""
