"""The helpers of `make bench-operator-scale` (bench_operator_scale.py)."""
