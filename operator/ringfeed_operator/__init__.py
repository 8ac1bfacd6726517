"""Ringfeed's Kubernetes operator (kopf): reconciles Dataset, Split and TrainingJob objects."""
