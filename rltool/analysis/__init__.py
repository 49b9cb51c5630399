"""Results read back from run folders: tables, statistics, reports."""
