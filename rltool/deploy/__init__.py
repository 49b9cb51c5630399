"""A trained policy outside training: loading it, exporting it."""
