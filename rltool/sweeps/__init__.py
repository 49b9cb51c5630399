"""Sweeps: per-job status files, summaries, and rltool tune's library."""
