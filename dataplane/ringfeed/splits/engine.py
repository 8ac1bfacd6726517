"""The splits engine: rows of metadata in, UUID lists per part out. Pure (no I/O), deterministic, vectorised.

Following Versaci & Busonera (2021, §4.1) and improving on it:

1. **Targets** per part × class from the ratios, the class balance and the caps (largest-remainder rounding, so
   they add up exactly).
2. **Groups to parts.** Every group is assigned whole, so a patient never straddles parts. Where the paper deals
   groups round-robin while they fit and the rest at random, Ringfeed places groups largest first (shuffled within
   each power-of-two size class, so the seed matters), each on the part where it most reduces a squared error
   against the parts' shares. The class-stratified objective (every class in proportion in every part) is kept
   when it lands each part within 0.5 % of its size; when classes are too sparse for that (few samples per class
   and part), the size-first objective holds the ratios instead. A local search then improves the greedy result
   (batches of group moves, swaps, and for a few groups kicked restarts; per group, never per row) on the same
   objective, or with an explicit balance on the shortfall of every part against the samples it must draw.
   Ungrouped rows are dealt per class with the rounding carried across classes, which makes ungrouped splits exact.
3. **Rows within parts.** Where balance or caps need fewer rows than a part's groups hold, rows are drawn
   round-robin across the part's groups (in a random group order, random rows within each group): every group
   contributes before any contributes twice, as in the paper. What a part's groups cannot give is drawn from the
   other parts, within their caps.

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
    uuids = table.array("uuid")[rows]
    classes, cls = np.unique(table.array("label")[rows], return_inverse=True)
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
    needs = None if weights is None else np.outer(targets.sum(axis=1), weights)
    part_of_group, placement, search = _assign_groups(group, cls, groups_total, pool_shares, group_keys, needs)
    part = part_of_group[group]
    pools = np.bincount(part * len(classes) + cls, minlength=len(names) * len(classes)).reshape(len(names), -1)

    natural = weights is None
    capped = bool(spec.max_samples or spec.max_per_part)
    caps = dict(spec.max_per_part)
    part_caps = np.array([caps.get(name, np.iinfo(np.int64).max) for name in names], dtype=np.int64)
    take = pools if natural and not capped else _take_counts(pools, targets.sum(axis=1), weights, part_caps, ratios)
    chosen = np.arange(rows.size) if np.array_equal(take, pools) else _draw(part, cls, group, row_keys,
                                                                              group_keys, take)
    parts: dict[str, np.ndarray] = {}
    for index, name in enumerate(names):
        members = chosen[part[chosen] == index]
        if members.size == 0:
            raise SplitError(_empty_part_message(name, spec, pools[index], classes, weights, label_names))
        parts[name] = _sorted_uuids(uuids[members])

    sizes = table.array("sample_bytes")[rows] if "sample_bytes" in table else None
    stats = _stats(spec, names, classes, label_names, targets, pools, part, cls, group, chosen, sizes,
                   scanned=scanned, selected=rows.size, groups_total=groups_total, weights=weights,
                   placement=placement, search=search)
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


def _take_counts(pools: np.ndarray, part_totals: np.ndarray, weights: np.ndarray | None, part_caps: np.ndarray,
                 ratios: np.ndarray) -> np.ndarray:
    """Samples to draw per part × class from what each part's groups hold. What a part cannot give of its target
    is passed on to the parts that can give more, by ratio and within their caps, so that the total stays what
    the targets add up to whenever the groups hold enough."""
    if weights is None:
        most = pools.sum(axis=1)
    else:
        most = np.array([_most_balanced(pool, weights) for pool in pools], dtype=np.int64)
    most = np.minimum(most, part_caps)
    totals = np.minimum(part_totals, most)
    shortfall = int(part_totals.sum() - totals.sum())
    while shortfall > 0 and (totals < most).any():
        extra = np.minimum(apportion(shortfall, np.where(totals < most, ratios, 0)), most - totals)
        totals += extra
        shortfall -= int(extra.sum())
    take = np.zeros_like(pools)
    for index, pool in enumerate(pools):
        total = int(totals[index])
        take[index] = apportion(total, pool) if weights is None else _balanced_counts(total, pool, weights)
    return take


# Candidate totals tried at once by _most_balanced.
_TOTALS_AT_ONCE = 1024


def _most_balanced(pool: np.ndarray, weights: np.ndarray) -> int:
    """The largest total that ``pool`` (samples per class) can give with every class within one sample of its
    weighted share: each class gives the floor or the ceiling of its share, at most what the pool holds."""
    used = weights > 0
    low = int(np.floor((pool[used] / weights[used]).min() + 1e-9))
    high = int(np.floor(((pool[used] + 1) / weights[used]).min() + 1e-9))
    for top in range(high, low, -_TOTALS_AT_ONCE):
        totals = np.arange(top, max(top - _TOTALS_AT_ONCE, low), -1)
        shares = np.outer(totals, weights)
        fits = ((np.floor(shares + 1e-9) <= pool).all(axis=1)
                & (np.minimum(pool, np.ceil(shares - 1e-9)).sum(axis=1) >= totals))
        if fits.any():
            return int(totals[np.argmax(fits)])
    return low


def _balanced_counts(total: int, pool: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``total`` samples by class at ``weights``: the floor of every class's share, and one more for the classes
    with the largest remainders among those whose pool has one more (ties to the lower index)."""
    shares = total * weights
    counts = np.minimum(np.floor(shares + 1e-9).astype(np.int64), pool)
    remainder = shares - counts
    can_add = (pool > counts) & (remainder > 1e-9)
    short = int(total - counts.sum())
    if short > 0:
        order = np.argsort(-np.where(can_add, remainder, -1.0), kind="stable")
        counts[order[:min(short, int(can_add.sum()))]] += 1
    return counts


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
                   group_keys: np.ndarray, needs: np.ndarray | None) -> tuple[np.ndarray, str, dict | None]:
    """Part index per group, the placement used and what the local search did; see the module docstring.
    ``needs`` (parts × classes) are the samples an explicit balance draws: with them, the search minimises the
    shortfall of every part's groups against them instead of the placement's own objective."""
    parts, classes = pool_shares.shape
    pairs, pair_counts = np.unique(group.astype(np.int64) * classes + cls, return_counts=True)
    pair_group, pair_class = pairs // classes, pairs % classes
    sizes = np.bincount(pair_group, weights=pair_counts, minlength=groups_total).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(np.bincount(pair_group, minlength=groups_total))])

    if (sizes == 1).all():
        assignment = _deal_single_rows(pair_class, group_keys, pool_shares)
        _fill_empty_parts(assignment, sizes, parts, group_keys)
        return assignment, "dealt", None

    size_class = np.floor(np.log2(sizes)).astype(np.int64)
    order = np.lexsort((group_keys, -size_class))
    part_sizes = pool_shares.sum(axis=1)

    def place(placement: str) -> tuple[np.ndarray, dict | None]:
        placed = _place_largest_first(order, starts, pair_class, pair_counts, pool_shares, placement)
        _fill_empty_parts(placed, sizes, parts, group_keys)
        if needs is not None:  # searched once, against the needs, when the placement is chosen
            return placed, None
        objective = Objective.for_pools(placement, pool_shares)
        return placed, _improve(placed, objective, pair_group, pair_class, pair_counts, sizes, group_keys)

    def miss(placed: np.ndarray) -> np.ndarray:
        return np.abs(np.bincount(placed, weights=sizes, minlength=parts) - part_sizes)

    placement = "class-stratified"
    assignment, search = place(placement)
    stratified_miss = miss(assignment)
    if (stratified_miss > np.maximum(SIZE_TOLERANCE * part_sizes, 1)).any():
        by_size, by_size_search = place("size-first")
        if (miss(by_size) ** 2 / part_sizes).sum() < (stratified_miss ** 2 / part_sizes).sum():
            assignment, placement, search = by_size, "size-first", by_size_search
    if needs is not None:
        search = _improve(assignment, Objective.shortfall(needs), pair_group, pair_class, pair_counts, sizes,
                          group_keys)
    return assignment, placement, search


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

    - "class-stratified": Σ_c (filled_c - share_c)² / share_c, i.e. the cost Σ n_c (2 filled_c + n_c) / share_c:
      every class in proportion, best when classes are dense;
    - "size-first": [(filled - share)² + Σ_c (filled_c - share_c)²] / part share, i.e. the cost
      [n (2 filled + n) + Σ n_c (2 filled_c + n_c)] / part share: part sizes first, classes in absolute numbers,
      which holds the ratios when classes are too sparse to stratify.

    Plain Python over lists, as each step touches only a group's few classes."""
    parts, classes = pool_shares.shape
    filled = [[0.0] * classes for _ in range(parts)]
    totals = [0.0] * parts
    by_size = objective == "size-first"
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


# -- local search ---------------------------------------------------------------------------------------------------

# The descent after the greedy pass runs at most this many rounds (a round applies a batch of group moves on
# disjoint cells, or else one swap) and stops early once a round gains less than SEARCH_MIN_GAIN of the cost.
SEARCH_ROUNDS = 200
SEARCH_MIN_GAIN = 1e-4
# Swaps are tried between all groups up to this many, else between this many with the cheapest moves.
SWAP_CANDIDATES = 256
# Up to this many groups, where a few large groups leave a descent in poor local optima, the descent is followed by
# this many kicks (iterated local search).
KICK_GROUPS = 64
KICKS = 100
KICK_PATIENCE = 100
# Up to this many assignments (parts ** groups) every one is tried: the result is then the exact optimum.
EXACT_ASSIGNMENTS = 20_000


@dataclasses.dataclass(frozen=True)
class Objective:
    """The cost of an assignment: a sum over cells — part × class, and part × total in the last column — of
    ``weight · gap²``, where ``gap = filled − target``, or only its shortfall (``min(gap, 0)``) when
    ``shortfall_only``. Being a sum over cells, moves that touch disjoint cells change it independently.

    - "class-stratified": targets are each part's share of every class, weights 1 / share (no total term);
    - "size-first": the same targets plus each part's size, all weighted 1 / the part's size;
    - "shortfall": for an explicit balance, the samples each part must draw of each class, weights 1 / that
      number; a surplus costs nothing, as a part simply draws fewer of that class."""

    name: str
    targets: np.ndarray
    weights: np.ndarray
    shortfall_only: bool

    @classmethod
    def for_pools(cls, placement: str, pool_shares: np.ndarray) -> Objective:
        part_sizes = pool_shares.sum(axis=1, keepdims=True)
        targets = np.hstack([pool_shares, part_sizes])
        if placement == "class-stratified":
            weights = np.hstack([1 / pool_shares, np.zeros_like(part_sizes)])
        else:
            weights = np.broadcast_to(1 / part_sizes, targets.shape).copy()
        return cls(placement, targets, weights, False)

    @classmethod
    def shortfall(cls, needs: np.ndarray) -> Objective:
        needs = needs.astype(np.float64)
        weights = np.divide(1.0, needs, out=np.zeros_like(needs), where=needs > 0)
        padding = np.zeros((len(needs), 1))
        return cls("shortfall", np.hstack([needs, padding]), np.hstack([weights, padding]), True)

    def cell_cost(self, part, column, filled) -> np.ndarray:
        gap = filled - self.targets[part, column]
        if self.shortfall_only:
            gap = np.minimum(gap, 0.0)
        return self.weights[part, column] * gap * gap

    def cost(self, filled: np.ndarray) -> float:
        parts, columns = np.indices(filled.shape)
        return float(self.cell_cost(parts, columns, filled).sum())


@dataclasses.dataclass
class _Cells:
    """The groups as entries (group, column, count): one per class a group holds, plus one per group in the total
    column when the objective weighs sizes; the part of every group and what every part holds per column."""

    group: np.ndarray
    column: np.ndarray
    count: np.ndarray
    assignment: np.ndarray
    filled: np.ndarray

    @classmethod
    def of(cls, assignment: np.ndarray, objective: Objective, pair_group: np.ndarray, pair_class: np.ndarray,
           pair_counts: np.ndarray, sizes: np.ndarray) -> _Cells:
        parts, width = objective.targets.shape
        group, column, count = pair_group, pair_class, pair_counts.astype(np.float64)
        if objective.weights[:, -1].any():
            group = np.concatenate([group, np.arange(sizes.size)])
            column = np.concatenate([column, np.full(sizes.size, width - 1)])
            count = np.concatenate([count, sizes.astype(np.float64)])
        return cls(group, column, count, assignment, np.zeros((parts, width))).reassigned(assignment)

    def reassigned(self, assignment: np.ndarray) -> _Cells:
        """The same groups in the parts ``assignment`` gives."""
        parts, width = self.filled.shape
        filled = np.bincount(assignment[self.group] * width + self.column, weights=self.count,
                             minlength=parts * width)
        return _Cells(self.group, self.column, self.count, assignment, filled.reshape(parts, width))

    def move(self, groups: np.ndarray, destination: np.ndarray) -> None:
        """Move ``groups`` (distinct) to the parts ``destination``."""
        moved = self.assignment.copy()
        moved[groups] = destination
        entries = np.flatnonzero(moved[self.group] != self.assignment[self.group])
        group, column, count = self.group[entries], self.column[entries], self.count[entries]
        width, cells = self.filled.shape[1], self.filled.size
        change = (np.bincount(moved[group] * width + column, weights=count, minlength=cells)
                  - np.bincount(self.assignment[group] * width + column, weights=count, minlength=cells))
        self.filled += change.reshape(self.filled.shape)
        self.assignment[groups] = destination


def _improve(assignment: np.ndarray, objective: Objective, pair_group: np.ndarray, pair_class: np.ndarray,
             pair_counts: np.ndarray, sizes: np.ndarray, group_keys: np.ndarray) -> dict:
    """Local search from the greedy assignment (updated in place): a descent, then for up to KICK_GROUPS groups
    kicked descents from the best assignment found, and for up to EXACT_ASSIGNMENTS assignments the exact
    optimum. Deterministic (ties and kicks go by the seed's group keys) and
    bounded in steps. No part is ever emptied. Returns the objective's name,
    its value after the greedy pass and after the search, and how many groups changed part."""
    greedy = assignment.copy()
    cells = _Cells.of(assignment, objective, pair_group, pair_class, pair_counts, sizes)
    before = objective.cost(cells.filled)
    _descend(objective, cells, group_keys)
    parts = objective.targets.shape[0]
    if assignment.size <= KICK_GROUPS and parts > 1:
        assignment[:] = _kicked_descents(objective, cells, group_keys).assignment
    if 1 < parts <= assignment.size and parts ** assignment.size <= EXACT_ASSIGNMENTS:
        exact = _exact_optimum(objective, cells)
        if objective.cost(exact.filled) < objective.cost(cells.reassigned(assignment).filled) - 1e-9:
            assignment[:] = exact.assignment
    return {"objective": objective.name, "greedy": round(before, 6),
            "searched": round(objective.cost(cells.reassigned(assignment).filled), 6),
            "groups_moved": int((assignment != greedy).sum())}


def _exact_optimum(objective: Objective, cells: _Cells) -> _Cells:
    """The cheapest of every assignment that leaves no part empty (few groups only: parts ** groups of them)."""
    parts, width = objective.targets.shape
    groups = cells.assignment.size
    every = np.stack(np.unravel_index(np.arange(parts ** groups), (parts,) * groups), axis=1)
    every = every[np.all([(every == part).any(axis=1) for part in range(parts)], axis=0)]
    cell_index = every[:, cells.group] * width + cells.column + (np.arange(len(every)) * parts * width)[:, None]
    filled = np.bincount(cell_index.ravel(), weights=np.tile(cells.count, len(every)),
                         minlength=len(every) * parts * width).reshape(len(every), parts, width)
    part, column = np.indices((parts, width))
    costs = objective.cell_cost(part, column, filled).sum(axis=(1, 2))
    return cells.reassigned(every[int(np.argmin(costs))].copy())


def _descend(objective: Objective, cells: _Cells, group_keys: np.ndarray) -> None:
    """Rounds that apply together the improving group moves on disjoint cells (so that their gains add up
    exactly), and when no move improves, the best swap of two groups between parts, while they lower the cost."""
    cost = objective.cost(cells.filled)
    for _ in range(SEARCH_ROUNDS):
        if cost <= 0:
            break
        deltas = _move_deltas(objective, cells)
        tolerance = 1e-9 * (1 + cost)
        accepted, destination = _disjoint_moves(deltas, cells, group_keys, tolerance)
        if accepted.size:
            gain = -float(deltas[accepted, destination].sum())
        else:
            pool, change = _swap_changes(deltas, objective, cells, group_keys)
            first, second = divmod(int(np.argmin(change)), pool.size)
            gain = -float(change[first, second])
            if gain <= tolerance:
                break
            accepted = pool[[first, second]]
            destination = cells.assignment[pool[[second, first]]]
        cells.move(accepted, destination)
        cost -= gain
        if gain < SEARCH_MIN_GAIN * (cost + gain):
            break


def _kicked_descents(objective: Objective, cells: _Cells, group_keys: np.ndarray) -> _Cells:
    """Iterated local search: from the best assignment so far, move one to three random groups to random other
    parts and descend again; keep the result when it is better. The kicks are drawn from the seed's group keys."""
    rng = np.random.default_rng(group_keys.view(np.uint64))
    groups, parts = cells.assignment.size, cells.filled.shape[0]
    best, best_cost = cells, objective.cost(cells.filled)
    last_better = 0
    for kick in range(KICKS):
        if kick - last_better > KICK_PATIENCE or best_cost <= 0:
            break
        start = best.assignment.copy()
        for group in rng.integers(0, groups, 1 + kick % 3):
            if np.count_nonzero(start == start[group]) > 1:
                start[group] = (start[group] + rng.integers(1, parts)) % parts
        trial = best.reassigned(start)
        _descend(objective, trial, group_keys)
        cost = objective.cost(trial.filled)
        if cost < best_cost - 1e-9 * (1 + best_cost):
            best, best_cost, last_better = trial, cost, kick
    return best


def _move_deltas(objective: Objective, cells: _Cells) -> np.ndarray:
    """The change of the cost for moving each group (rows) to each part (columns); +inf for its own part."""
    parts = objective.targets.shape[0]
    groups = cells.assignment.size
    own = cells.assignment[cells.group]
    now = cells.filled[own, cells.column]
    leave = objective.cell_cost(own, cells.column, now - cells.count) - objective.cell_cost(own, cells.column, now)
    deltas = np.empty((groups, parts))
    for part in range(parts):
        here = cells.filled[part, cells.column]
        arrive = (objective.cell_cost(part, cells.column, here + cells.count)
                  - objective.cell_cost(part, cells.column, here))
        deltas[:, part] = np.bincount(cells.group, weights=leave + arrive, minlength=groups)
    deltas[np.arange(groups), cells.assignment] = np.inf
    return deltas


def _disjoint_moves(deltas: np.ndarray, cells: _Cells, group_keys: np.ndarray,
                    tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """The improving moves to apply together, and their parts: each group's best move, best first; a move is kept
    when no better one touches any of its cells, and while its part keeps a group."""
    parts, width = cells.filled.shape
    assignment = cells.assignment
    best_part = np.argmin(deltas, axis=1)
    gain = deltas[np.arange(deltas.shape[0]), best_part]
    groups_per_part = np.bincount(assignment, minlength=parts)
    candidates = np.flatnonzero((gain < -tolerance) & (groups_per_part[assignment] > 1))
    candidates = candidates[np.lexsort((group_keys[candidates], gain[candidates]))]
    rank = np.full(deltas.shape[0], -1)
    rank[candidates] = np.arange(candidates.size)
    entries = np.flatnonzero(rank[cells.group] >= 0)
    entry_group = cells.group[entries]
    touched = np.concatenate([assignment[entry_group] * width + cells.column[entries],
                              best_part[entry_group] * width + cells.column[entries]])
    touched_rank = np.tile(rank[entry_group], 2)
    first_rank = np.full(parts * width, candidates.size)
    np.minimum.at(first_rank, touched, touched_rank)
    blocked = np.bincount(touched_rank[touched_rank > first_rank[touched]], minlength=candidates.size) > 0
    accepted = candidates[~blocked]
    keep = np.ones(accepted.size, dtype=bool)
    for part in range(parts):  # accepted is best first: the worst leavers go back if they would empty a part
        leaving = np.flatnonzero(assignment[accepted] == part)
        keep[leaving[groups_per_part[part] - 1:]] = False
    return accepted[keep], best_part[accepted[keep]]


def _swap_changes(deltas: np.ndarray, objective: Objective, cells: _Cells,
                  group_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate groups and the change of the cost for exchanging the parts of candidates i and j, where i's part
    comes first (+inf otherwise, so that each swap appears once): the sum of the two moves' changes, corrected on
    the columns both groups hold (the only cells where the two moves interact)."""
    assignment = cells.assignment
    if assignment.size > SWAP_CANDIDATES:
        pool = np.lexsort((group_keys, deltas.min(axis=1)))[:SWAP_CANDIDATES]
    else:
        pool = np.arange(assignment.size)
    pool_part = assignment[pool]
    one_way = deltas[pool][:, pool_part]  # [i, j]: group pool[i] moved to the part of pool[j]
    change = one_way + one_way.T
    change[pool_part[:, None] >= pool_part[None, :]] = np.inf
    local = np.full(assignment.size, -1)
    local[pool] = np.arange(pool.size)
    entries = np.flatnonzero(local[cells.group] >= 0)
    entries = entries[np.argsort(cells.column[entries], kind="stable")]
    _, block_start, block_size = np.unique(cells.column[entries], return_index=True, return_counts=True)
    per_entry = np.repeat(block_size, block_size)
    left = np.repeat(np.arange(entries.size), per_entry)
    right = np.repeat(np.repeat(block_start, block_size), per_entry) + _position_in_runs(np.diff(left) != 0)
    left, right = entries[left], entries[right]
    i, j = local[cells.group[left]], local[cells.group[right]]
    shared = pool_part[i] < pool_part[j]
    left, right, i, j = left[shared], right[shared], i[shared], j[shared]
    a, b, column = pool_part[i], pool_part[j], cells.column[left]
    n_i, n_j = cells.count[left], cells.count[right]

    def interaction(part, out, into):  # f(x - out + into) - f(x - out) - f(x + into) + f(x), x what part holds
        x, f = cells.filled[part, column], objective.cell_cost
        return f(part, column, x - out + into) - f(part, column, x - out) - f(part, column, x + into) \
            + f(part, column, x)

    correction = interaction(a, n_i, n_j) + interaction(b, n_j, n_i)
    change += np.bincount(i * pool.size + j, weights=correction, minlength=change.size).reshape(change.shape)
    return pool, change


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
           selected, groups_total, weights, placement, search) -> dict:
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
        "placement": placement, "search": search,
        "balance": ({str(int(label)): round(float(w), 6) for label, w in zip(classes, weights, strict=True)}
                    if weights is not None else "natural"),
        "label_names": {str(int(label)): label_names[label] for label in classes if 0 <= label < len(label_names)},
        "parts": parts,
    }
