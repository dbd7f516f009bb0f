"""Cluster metadata as KRaft keeps it: records, the image they build, the controller logic."""
