"""The reconcile logic, one module per kind: it reads the object, calls the builders and the data plane, and writes
status. kopf registers these functions in `ringfeed_operator.main`."""
