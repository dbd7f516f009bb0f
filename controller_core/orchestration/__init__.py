"""Orchestrators over the ClusterAdmin port: the same code drives every backend."""
