"""Ringfeed's Kubernetes operator (kopf): reconciles Dataset, Split, TrainingJob and Ring objects."""
