"""Pure functions from an object (a spec, a catalog entry, a stored result) to what the operator makes of it: the
data plane's objects, child manifests, status fields. No I/O: each is unit-tested without a cluster."""
