"""Train/validation/test (or k-fold) splits: UUID lists computed from metadata, stored as immutable versions.

``spec`` says what is asked, ``engine`` computes it (pure), ``storage`` keeps it in Cassandra and in files;
``create_split`` ties them together: scan the dataset's metadata, compute, store.
"""

from __future__ import annotations

from collections.abc import Callable

from ringfeed.splits.engine import SplitResult, check_columns, compute_split, content_hash
from ringfeed.splits.spec import Filter, SplitError, SplitSpec, parse_weights
from ringfeed.splits.storage import (
    SplitDatasetMismatch,
    SplitNotFound,
    StoredSplit,
    delete_split,
    export_split,
    get_split,
    import_split,
    list_splits,
    load_split,
    read_split_file,
    save_split,
)


def create_split(store, dataset: str, name: str, spec: SplitSpec,
                 progress: Callable[[int], None] | None = None) -> tuple[StoredSplit, bool]:
    """Scan ``dataset``'s metadata (``progress(rows_so_far)``), compute the split and store it as the next version
    of ``name`` (or return the latest one if identical); returns (split, created)."""
    schema = store.schema(dataset)
    check_columns(spec, [c.name for c in schema.columns])
    table = store.scan(dataset, "metadata_by_nat", ["uuid", "label", "sample_bytes", *spec.columns], progress)
    result = compute_split(table, spec, schema.label_names)
    return save_split(store, dataset, name, spec, result)


__all__ = [
    "Filter",
    "SplitDatasetMismatch",
    "SplitError",
    "SplitNotFound",
    "SplitResult",
    "SplitSpec",
    "StoredSplit",
    "compute_split",
    "content_hash",
    "create_split",
    "delete_split",
    "export_split",
    "get_split",
    "import_split",
    "list_splits",
    "load_split",
    "parse_weights",
    "read_split_file",
    "save_split",
]
