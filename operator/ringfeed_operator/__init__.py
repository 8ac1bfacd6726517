"""Ringfeed's Kubernetes operator (kopf): reconciles Dataset and Split objects. The TrainingJob CRD is installed
with them, but no controller acts on TrainingJobs yet."""
