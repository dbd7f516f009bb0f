"""Crash-safe storage: framed append-only files, the metadata log and snapshots."""
