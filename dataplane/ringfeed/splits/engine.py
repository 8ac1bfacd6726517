"""The splits engine: rows of metadata in, UUID lists per part out. Pure (no I/O), deterministic, vectorised.

Following Versaci & Busonera (2021, §4.1) and improving on it:

1. **Targets** per part × class from the ratios, the class balance and the caps (largest-remainder rounding, so
   they add up exactly).
2. **Groups to parts.** Every group is assigned whole, so a patient never straddles parts. Where the paper deals
   groups round-robin while they fit and the rest at random, Ringfeed places groups largest first (shuffled within
   each power-of-two size class, so the seed matters), each on the part where it most reduces a squared error
   against the parts' shares. The class-stratified objective (every class in proportion in every part) is kept
   when it lands each part within 0.5 % of its size; when classes are too sparse for that (few samples per class
   and part), the size-first objective holds the ratios instead. Ungrouped rows are dealt per class with the
   rounding carried across classes, which makes ungrouped splits exact.
3. **Rows within parts.** Where balance or caps need fewer rows than a part's groups hold, rows are drawn
   round-robin across the part's groups (in a random group order, random rows within each group): every group
   contributes before any contributes twice, as in the paper.

Randomness comes from the seed and from each row's UUID (not its position), so the same content and parameters
give a byte-identical split whatever order the rows were read in.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from ringfeed.splits.spec import Filter, SplitError, SplitSpec
from ringfeed.table import ColumnarTable, TextColumn


@dataclasses.dataclass(frozen=True)
class SplitResult:
    """UUIDs per part ((n, 16) uint8, sorted), the statistics and the content hash."""

    parts: dict[str, np.ndarray]
    stats: dict
    content_hash: str

    def __len__(self) -> int:
        return sum(len(u) for u in self.parts.values())


def compute_split(table: ColumnarTable, spec: SplitSpec, label_names: tuple[str, ...] = ()) -> SplitResult:
    """Split the rows of ``table`` (columns ``uuid``, ``label``, optional ``sample_bytes`` and those the spec
    names) as ``spec`` asks."""
    for required in ("uuid", "label"):
        if required not in table:
            raise SplitError(f"the metadata has no {required!r} column")
    scanned = len(table)
    if scanned == 0:
        raise SplitError("the dataset has no samples yet: ingest some first")
    check_columns(spec, table.columns)

    rows = np.flatnonzero(filter_mask(table, spec.filters, label_names))
    if rows.size == 0:
        raise SplitError(f"the filters ({'; '.join(map(str, spec.filters))}) select none of the "
                         f"{scanned:,} samples")
    uuids = table["uuid"][rows]
    classes, cls = np.unique(np.asarray(table["label"])[rows], return_inverse=True)
    class_counts = np.bincount(cls, minlength=len(classes))
    weights = _class_weights(spec.balance, classes, class_counts, label_names)
    names = [name for name, _ in spec.parts]
    ratios = np.array([ratio for _, ratio in spec.parts], dtype=np.float64)

    row_keys = _row_keys(uuids, spec.seed)
    group, group_keys, groups_total = _groups(table, spec.group_by, rows, row_keys, spec.seed)
    if groups_total < len(names):
        what = f"groups of {', '.join(spec.group_by)}" if spec.group_by else "samples"
        raise SplitError(f"{len(names)} parts need at least {len(names)} {what}; the selected data has "
                         f"{groups_total:,}")

    targets = _targets(spec, names, ratios, class_counts, weights)
    pool_shares = np.outer(ratios / ratios.sum(), class_counts)
    part_of_group, placement = _assign_groups(group, cls, groups_total, pool_shares, group_keys)
    part = part_of_group[group]
    pools = np.bincount(part * len(classes) + cls, minlength=len(names) * len(classes)).reshape(len(names), -1)

    natural = weights is None
    capped = bool(spec.max_samples or spec.max_per_part)
    take = pools if natural and not capped else _take_counts(pools, targets.sum(axis=1), weights)
    chosen = np.arange(rows.size) if np.array_equal(take, pools) else _draw(part, cls, group, row_keys,
                                                                              group_keys, take)
    parts: dict[str, np.ndarray] = {}
    for index, name in enumerate(names):
        members = chosen[part[chosen] == index]
        if members.size == 0:
            raise SplitError(_empty_part_message(name, spec, pools[index], classes, weights, label_names))
        parts[name] = _sorted_uuids(uuids[members])

    sizes = np.asarray(table["sample_bytes"])[rows] if "sample_bytes" in table else None
    stats = _stats(spec, names, classes, label_names, targets, pools, part, cls, group, chosen, sizes,
                   scanned=scanned, selected=rows.size, groups_total=groups_total, weights=weights,
                   placement=placement)
    return SplitResult(parts, stats, content_hash(parts))


def check_columns(spec: SplitSpec, available) -> None:
    """Every column the spec groups or filters by must exist."""
    known = _known_columns(available)
    for column in spec.columns:
        if column not in known:
            raise SplitError(f"unknown column {column!r} (columns: {', '.join(known)})")


def _known_columns(available) -> list[str]:
    """The columns a split may group or filter by."""
    return sorted({*available, "label"} - {"uuid", "sample_bytes"})


def content_hash(parts: dict[str, np.ndarray]) -> str:
    """sha256 over each part's name, size and sorted UUIDs, in part order."""
    digest = hashlib.sha256()
    for name, uuids in parts.items():
        digest.update(name.encode() + b"\0" + len(uuids).to_bytes(8, "big"))
        digest.update(np.ascontiguousarray(uuids, dtype=np.uint8).tobytes())
    return "sha256:" + digest.hexdigest()


# -- filters --------------------------------------------------------------------------------------------------------

def filter_mask(table: ColumnarTable, filters: tuple[Filter, ...], label_names: tuple[str, ...] = ()) -> np.ndarray:
    """Rows that pass every filter (null values pass none)."""
    mask = np.ones(len(table), dtype=bool)
    for f in filters:
        if f.column not in table:
            raise SplitError(f"filter {f}: unknown column {f.column!r} "
                             f"(columns: {', '.join(_known_columns(table.columns))})")
        column = table[f.column]
        if isinstance(column, TextColumn):
            values = [str(v) for v in f.values]
            lookup = np.array(column.values, dtype=object)
            hit = _compare(lookup.astype(str) if len(lookup) else lookup, f.op, values)
            # One entry per dictionary value, plus "null" (code -1) that matches nothing.
            mask &= np.append(hit, False)[column.codes]
        else:
            values = [_convert(f, v, column.dtype, label_names) for v in f.values]
            mask &= _compare(np.asarray(column), f.op, values)
        if f.column in table.nulls:
            mask &= ~table.nulls[f.column]
    return mask


def _compare(values: np.ndarray, op: str, operands: list) -> np.ndarray:
    if op in ("in", "not in"):
        hit = np.isin(values, np.array(operands))
        return hit if op == "in" else ~hit
    operand = operands[0]
    return {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
            ">=": np.greater_equal}[op](values, operand)


def _convert(f: Filter, value, dtype: np.dtype, label_names: tuple[str, ...]):
    if f.column == "label" and isinstance(value, str) and value in label_names:
        return label_names.index(value)
    if dtype == np.bool_:
        if isinstance(value, bool):
            return value
    elif dtype.kind == "i":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif dtype.kind == "f":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    hint = f" (class names: {', '.join(label_names)})" if f.column == "label" and label_names else ""
    kind = {"b": "a boolean", "i": "an integer", "f": "a number"}.get(dtype.kind, str(dtype))
    raise SplitError(f"filter {f}: {f.column} is {kind}, {value!r} is not{hint}")


# -- targets --------------------------------------------------------------------------------------------------------

def apportion(total: int, weights: np.ndarray, debt: np.ndarray | None = None) -> np.ndarray:
    """Integers proportional to ``weights`` that add up to ``total`` (largest remainder; ties to the lower index).

    ``debt`` (updated in place) carries each entry's rounding shortfall from one call to the next and is added to
    its remainder, so that many small apportionments (one per class) also add up right across calls."""
    weights = np.asarray(weights, dtype=np.float64)
    if total <= 0 or weights.sum() <= 0:
        return np.zeros(len(weights), dtype=np.int64)
    exact = weights / weights.sum() * total
    result = np.floor(exact).astype(np.int64)
    short = int(total - result.sum())
    if short:
        bonus = exact - result + (debt if debt is not None else 0)
        result[np.argsort(-bonus, kind="stable")[:short]] += 1
    if debt is not None:
        debt += exact - result
    return result


def _class_weights(balance, classes: np.ndarray, counts: np.ndarray,
                   label_names: tuple[str, ...]) -> np.ndarray | None:
    """Target class proportions (summing to 1), or None for the natural ratio."""
    if balance == "natural":
        return None
    if balance == "equal":
        return np.full(len(classes), 1 / len(classes))
    weights = np.zeros(len(classes))
    position = {int(label): i for i, label in enumerate(classes)}
    given = set()
    for key, weight in balance:
        label = label_names.index(key) if key in label_names else _label_number(key, label_names)
        given.add(label)
        if label not in position:
            if weight:
                raise SplitError(f"balance gives label {key} a weight, but the selected data has no sample of it")
            continue
        weights[position[label]] = weight
    missing = [int(c) for c in classes if int(c) not in given]
    if missing:
        shown = ", ".join(f"{m} ({counts[position[m]]:,} samples)" for m in missing)
        raise SplitError(f"balance gives no weight to label {shown}; add it, or filter it out with a "
                         f"filter like 'label in ({', '.join(str(k) for k, _ in balance)})'")
    return weights / weights.sum()


def _label_number(key: str, label_names: tuple[str, ...]) -> int:
    try:
        return int(key)
    except ValueError:
        hint = f" (class names: {', '.join(label_names)})" if label_names else ""
        raise SplitError(f"balance names unknown label {key!r}{hint}") from None


def _targets(spec: SplitSpec, names: list[str], ratios: np.ndarray, class_counts: np.ndarray,
             weights: np.ndarray | None) -> np.ndarray:
    """Ideal samples per part × class."""
    if weights is None:
        total, shares = int(class_counts.sum()), class_counts.astype(np.float64)
    else:
        used = weights > 0
        total, shares = int(np.floor((class_counts[used] / weights[used]).min() + 1e-9)), weights
    if spec.max_samples:
        total = min(total, spec.max_samples)
    if total < len(names):
        raise SplitError(f"{len(names)} parts need at least {len(names)} samples; the request leaves {total:,}")
    part_totals = apportion(total, ratios)
    caps = dict(spec.max_per_part)
    part_totals = np.array([min(t, caps.get(name, t)) for name, t in zip(names, part_totals, strict=True)])
    return np.stack([apportion(int(t), shares) for t in part_totals])


def _take_counts(pools: np.ndarray, part_totals: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """Samples to draw per part × class from what each part's groups hold."""
    take = np.zeros_like(pools)
    for index, pool in enumerate(pools):
        if weights is None:
            take[index] = apportion(int(min(part_totals[index], pool.sum())), pool)
        else:
            used = weights > 0
            feasible = int(np.floor((pool[used] / weights[used]).min() + 1e-9))
            take[index] = np.minimum(apportion(min(int(part_totals[index]), feasible), weights), pool)
    return take


# -- groups ---------------------------------------------------------------------------------------------------------

def _row_keys(uuids: np.ndarray, seed: int) -> np.ndarray:
    """A pseudo-random uint64 per row from its UUID and the seed (SplitMix64 finaliser)."""
    words = np.ascontiguousarray(uuids).view(">u8").astype(np.uint64)
    salt = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    return _mix(words[:, 0] ^ _mix(words[:, 1] ^ salt))


def _mix(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _groups(table: ColumnarTable, group_by: tuple[str, ...], rows: np.ndarray, row_keys: np.ndarray,
            seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Group index per selected row (groups numbered in the order of their values), a random key per group,
    and the number of groups. Without group_by every row is its own group, keyed by its row key."""
    if not group_by:
        return np.arange(rows.size), row_keys, rows.size
    combined = np.zeros(rows.size, dtype=np.int64)
    for name in group_by:
        codes, cardinality = _value_codes(table, name, rows)
        if combined.max(initial=0) >= np.iinfo(np.int64).max // max(cardinality, 1):
            combined = np.unique(combined, return_inverse=True)[1].astype(np.int64)
        combined = combined * cardinality + codes
    _, group = np.unique(combined, return_inverse=True)
    count = int(group.max()) + 1
    return group, np.random.default_rng(seed).random(count), count


def _value_codes(table: ColumnarTable, name: str, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes that order like the values (nulls last), and how many there can be."""
    column = table[name]
    if isinstance(column, TextColumn):
        order = np.argsort(np.array(column.values, dtype=object).astype(str), kind="stable")
        rank = np.empty(len(order) + 1, dtype=np.int64)
        rank[order] = np.arange(len(order))
        rank[-1] = len(order)
        return rank[column.codes[rows]], len(order) + 1
    _, codes = np.unique(np.asarray(column)[rows], return_inverse=True)
    codes = codes.astype(np.int64)
    if name in table.nulls:
        codes = np.where(table.nulls[name][rows], codes.max(initial=0) + 1, codes)
    return codes, int(codes.max(initial=0)) + 1


# Class-stratified placement is kept when it lands every part within this fraction of its size (or one sample).
SIZE_TOLERANCE = 0.005


def _assign_groups(group: np.ndarray, cls: np.ndarray, groups_total: int, pool_shares: np.ndarray,
                   group_keys: np.ndarray) -> tuple[np.ndarray, str]:
    """Part index per group and the placement used; see the module docstring."""
    parts, classes = pool_shares.shape
    pairs, pair_counts = np.unique(group.astype(np.int64) * classes + cls, return_counts=True)
    pair_group, pair_class = pairs // classes, pairs % classes
    sizes = np.bincount(pair_group, weights=pair_counts, minlength=groups_total).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(np.bincount(pair_group, minlength=groups_total))])

    if (sizes == 1).all():
        assignment, placement = _deal_single_rows(pair_class, group_keys, pool_shares), "dealt"
    else:
        size_class = np.floor(np.log2(sizes)).astype(np.int64)
        order = np.lexsort((group_keys, -size_class))
        part_sizes = pool_shares.sum(axis=1)

        def miss(placed: np.ndarray) -> np.ndarray:
            return np.abs(np.bincount(placed, weights=sizes, minlength=parts) - part_sizes)

        assignment = _place_largest_first(order, starts, pair_class, pair_counts, pool_shares, "classes")
        placement = "class-stratified"
        stratified_miss = miss(assignment)
        if (stratified_miss > np.maximum(SIZE_TOLERANCE * part_sizes, 1)).any():
            by_size = _place_largest_first(order, starts, pair_class, pair_counts, pool_shares, "sizes")
            if (miss(by_size) ** 2 / part_sizes).sum() < (stratified_miss ** 2 / part_sizes).sum():
                assignment, placement = by_size, "size-first"
    _fill_empty_parts(assignment, sizes, parts, group_keys)
    return assignment, placement


def _deal_single_rows(pair_class: np.ndarray, group_keys: np.ndarray, pool_shares: np.ndarray) -> np.ndarray:
    """Ungrouped rows (or one-row groups): per class, in random order, cut by largest remainder with the rounding
    debt carried from class to class, so that each class (±1) and each part's total (±1) are exact."""
    parts, classes = pool_shares.shape
    assignment = np.zeros(len(pair_class), dtype=np.int64)
    by_class = np.lexsort((group_keys, pair_class))
    sorted_class = pair_class[by_class]
    first = np.searchsorted(sorted_class, np.arange(classes))
    last = np.searchsorted(sorted_class, np.arange(classes), side="right")
    debt = np.zeros(parts)
    for c in np.unique(sorted_class):
        counts = apportion(int(last[c] - first[c]), pool_shares[:, c], debt)
        assignment[by_class[first[c]: last[c]]] = np.repeat(np.arange(parts), counts)
    return assignment


def _place_largest_first(order: np.ndarray, starts: np.ndarray, pair_class: np.ndarray, pair_counts: np.ndarray,
                         pool_shares: np.ndarray, objective: str) -> np.ndarray:
    """Greedy placement, each group on the part where it most reduces a squared error:

    - "classes": Σ_c (filled_c - share_c)² / share_c, i.e. the cost Σ n_c (2 filled_c + n_c) / share_c: every class
      in proportion, best when classes are dense;
    - "sizes": [(filled - share)² + Σ_c (filled_c - share_c)²] / part share, i.e. the cost
      [n (2 filled + n) + Σ n_c (2 filled_c + n_c)] / part share: part sizes first, classes in absolute numbers,
      which holds the ratios when classes are too sparse to stratify.

    Plain Python over lists, as each step touches only a group's few classes."""
    parts, classes = pool_shares.shape
    filled = [[0.0] * classes for _ in range(parts)]
    totals = [0.0] * parts
    by_size = objective == "sizes"
    inverse = (1.0 / pool_shares).tolist()
    inverse_part = (1.0 / pool_shares.sum(axis=1)).tolist()
    starts_list, classes_list, counts_list = starts.tolist(), pair_class.tolist(), pair_counts.tolist()
    chosen = [0] * (len(starts_list) - 1)
    for g in order.tolist():
        entries = [(classes_list[k], counts_list[k]) for k in range(starts_list[g], starts_list[g + 1])]
        size = sum(n for _, n in entries)
        best, best_cost = 0, float("inf")
        for p in range(parts):
            level = filled[p]
            if by_size:
                cost = size * (2 * totals[p] + size)
                for c, n in entries:
                    cost += n * (2 * level[c] + n)
                cost *= inverse_part[p]
            else:
                scale = inverse[p]
                cost = 0.0
                for c, n in entries:
                    cost += n * (2 * level[c] + n) * scale[c]
            if cost < best_cost:
                best, best_cost = p, cost
        level = filled[best]
        for c, n in entries:
            level[c] += n
        totals[best] += size
        chosen[g] = best
    return np.array(chosen, dtype=np.int64)


def _fill_empty_parts(assignment: np.ndarray, sizes: np.ndarray, parts: int, group_keys: np.ndarray) -> None:
    """A part left without groups takes the smallest group of the part holding the most groups."""
    groups_per_part = np.bincount(assignment, minlength=parts)
    for empty in np.flatnonzero(groups_per_part == 0):
        donor = int(np.argmax(groups_per_part))
        candidates = np.flatnonzero(assignment == donor)
        moved = candidates[np.lexsort((group_keys[candidates], sizes[candidates]))[0]]
        assignment[moved] = empty
        groups_per_part[donor] -= 1
        groups_per_part[empty] += 1


# -- drawing rows ---------------------------------------------------------------------------------------------------

def _draw(part: np.ndarray, cls: np.ndarray, group: np.ndarray, row_keys: np.ndarray, group_keys: np.ndarray,
          take: np.ndarray) -> np.ndarray:
    """Row indices: per part × class, the first ``take`` rows dealt round-robin across groups."""
    classes = take.shape[1]
    by_group = np.lexsort((row_keys, group, cls, part))
    p, c, g = part[by_group], cls[by_group], group[by_group]
    rank = _position_in_runs((p[1:] != p[:-1]) | (c[1:] != c[:-1]) | (g[1:] != g[:-1]))
    dealt = np.lexsort((group_keys[g], rank, c, p))
    p, c = p[dealt], c[dealt]
    position = _position_in_runs((p[1:] != p[:-1]) | (c[1:] != c[:-1]))
    keep = position < take.ravel()[p * classes + c]
    return by_group[dealt][keep]


def _position_in_runs(changes: np.ndarray) -> np.ndarray:
    """0, 1, 2… restarting wherever ``changes`` (between neighbours) is true."""
    n = changes.size + 1
    starts = np.zeros(n, dtype=np.int64)
    starts[1:] = np.where(changes, np.arange(1, n), 0)
    return np.arange(n) - np.maximum.accumulate(starts)


def _sorted_uuids(uuids: np.ndarray) -> np.ndarray:
    words = np.ascontiguousarray(uuids).view(">u8")
    return np.ascontiguousarray(uuids[np.lexsort((words[:, 1], words[:, 0]))])


# -- statistics -----------------------------------------------------------------------------------------------------

def _empty_part_message(name, spec, pool, classes, weights, label_names) -> str:
    if weights is not None:
        lacking = [_label_text(int(c), label_names) for c, n, w in zip(classes, pool, weights, strict=True)
                   if w > 0 and n == 0]
        if lacking:
            return (f"part {name!r} would be empty: its groups hold no sample of {', '.join(lacking)}, which the "
                    "balance asks for; use fewer parts, more groups or another seed")
    return f"part {name!r} would be empty; use fewer parts, a larger cap or more data"


def _label_text(label: int, label_names: tuple[str, ...]) -> str:
    return f"{label} ({label_names[label]})" if 0 <= label < len(label_names) else str(label)


def _stats(spec, names, classes, label_names, targets, pools, part, cls, group, chosen, sizes, *, scanned,
           selected, groups_total, weights, placement) -> dict:
    taken = np.bincount(part[chosen] * len(classes) + cls[chosen],
                        minlength=len(names) * len(classes)).reshape(len(names), -1)
    group_part = np.unique(part[chosen].astype(np.int64) * groups_total + group[chosen]) // groups_total
    groups_per_part = np.bincount(group_part, minlength=len(names))
    bytes_per_part = (np.bincount(part[chosen], weights=sizes[chosen], minlength=len(names)).astype(np.int64)
                      if sizes is not None else np.zeros(len(names), dtype=np.int64))
    total = int(taken.sum())
    parts = []
    for index, (name, ratio) in enumerate(spec.parts):
        parts.append({
            "name": name, "ratio": ratio, "samples": int(taken[index].sum()), "target": int(targets[index].sum()),
            "groups": int(groups_per_part[index]), "bytes": int(bytes_per_part[index]),
            "share": round(float(taken[index].sum()) / total, 6) if total else 0.0,
            "labels": {str(int(label)): {"samples": int(taken[index, k]), "target": int(targets[index, k]),
                                         "available": int(pools[index, k])}
                       for k, label in enumerate(classes)},
        })
    return {
        "scanned": int(scanned), "selected": int(selected), "samples": total, "groups": int(groups_total),
        "placement": placement,
        "balance": ({str(int(label)): round(float(w), 6) for label, w in zip(classes, weights, strict=True)}
                    if weights is not None else "natural"),
        "label_names": {str(int(label)): label_names[label] for label in classes if 0 <= label < len(label_names)},
        "parts": parts,
    }
