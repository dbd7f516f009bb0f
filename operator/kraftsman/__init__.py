"""kraftsman: the Kubernetes-facing application (CLI, custom resources, kopf operator)."""

__version__ = "0.1.0"
