"""The capacity model of docs/capacity.md: the ring nodes and sidecar cores a training load needs, computed from
figures measured in docs/benchmarks.md (each figure below names its section and machine).

    python benchmarks/capacity_model.py              the worked examples; writes docs/capacity.svg and .csv
    python benchmarks/capacity_model.py --gpus 64 --images-per-s 4350 --sample-bytes 110000 --rf 3
                                                     one load: ring nodes, sidecar cores, autoscaler bounds

For N GPUs that each train on R images/s, samples of S bytes, replication factor F:

    ring nodes = the least n ≥ F such that n × capacity(S, n) × 75 % ≥ N × R × replicas read per row
    sidecar cores per GPU = R × 0.58 ms × S ÷ 20.5 kB

capacity(S, n) is one node's saturated samples/s: 18,432 (20 kB samples, 2 CPUs, plain text), scaled by the TLS
ratio (a Ring's clients always use TLS), by the size curve to S, and by the node's CPU per row to the requests that
batches make across n nodes. `beyond_measured` names every step of a sizing that rests on more than the measured
figures. Everything but `write_plot` and `main` is pure arithmetic.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import math
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLOT = REPO / "docs" / "capacity.svg"
NUMBERS = REPO / "docs" / "capacity.csv"


@dataclasses.dataclass(frozen=True)
class Figure:
    """A measured figure: its value, what it is, and where: a `## ` section of docs/benchmarks.md whose text holds
    `written` verbatim (a range is used by its middle), and the machine it was measured on."""

    value: float
    what: str
    section: str
    written: str
    machine: str


DEVICE_H100 = "device machine: NVIDIA H100 host, 16 cores, 2026-11-27"
DEVICE_H200 = "device machine: NVIDIA H200 host, 16 cores, 2026-11-26"
TWO_CORES = "2-core development machine, node and client on the same cores, 2026-11-22"

# The per-node figure, which everything else scales.
NODE_SAMPLES_PER_S = Figure(
    18_432, "samples/s of 20 kB that one node, pinned to 2 CPUs of its own, served to 4 loaders (batches of 256)",
    "`make bench-ring-nodes`", "18,432", DEVICE_H100)
MEASURED_SAMPLE_BYTES = 20_000
MEASURED_BATCH_SIZE = 256
MEASURED_NODE_CPUS = 2

# How a node's rate falls with the sample's size: one node and one loader (its defaults: requests of 512 KiB)
# sharing 16 cores, direct, nothing pinned.
SIZE_CURVE = (
    (20_000, Figure((137_653 + 140_671) / 2, "samples/s of 20 kB, node and loader sharing 16 cores",
                    "`make bench-wan`", "137,653–140,671", DEVICE_H200)),
    (150_000, Figure((25_103 + 27_372) / 2, "samples/s of 150 kB, node and loader sharing 16 cores",
                     "`make bench-wan`", "25,103–27,372", DEVICE_H200)),
)

# A node's CPU per 20 kB row against the rows of one read request. The loader groups each batch's samples by owning
# node into requests of REQUEST_BYTES, so the more nodes, the fewer rows a batch gives each.
NODE_CPU_MS_PER_ROW = (
    (1, Figure((0.40 + 0.46) / 2, "ms of node CPU per 20 kB row, 1 row per request", "`make bench-loader`",
               "0.40–0.46", TWO_CORES)),
    (8, Figure(0.20, "ms of node CPU per 20 kB row, 8 rows per request", "`make bench-loader`", "~0.20 with 8",
               TWO_CORES)),
    (24, Figure(0.15, "ms of node CPU per 20 kB row, 24 rows per request", "`make bench-loader`", "~0.15 with 24",
                TWO_CORES)),
)

# The sidecar's work per image: read it, decode and resize it to 224×224 (native threads). Its copy of a batch into
# shared memory (~2-3 ms per 128 images, bench-sidecar) is left out.
DECODE_CPU_MS_PER_IMAGE = Figure(0.58, "ms of loader CPU per JPEG read and decoded to 224×224",
                                 "`make bench-loader`", "0.58 ms", TWO_CORES)
DECODE_JPEG_BYTES = Figure(20_500, "bytes per JPEG (320×240) of that figure", "`make bench-loader`", "20.5 kB",
                           TWO_CORES)

# A Ring's clients always speak TLS (docs/security.md). Loader over TLS ÷ plain text, one node, every batch size.
TLS_VS_PLAIN = Figure((0.86 + 0.91) / 2, "TLS ÷ plain text, node and loader sharing 16 cores", "`make bench-loader`",
                      "0.86-0.91", DEVICE_H100)

RESNET50_IMAGES_PER_S = Figure(4_350, "images/s of ResNet-50 on one H200 (bf16, batches of 256), fed by the sidecar",
                               "`make bench-sidecar`", "~4,350 images/s", DEVICE_H200)
# Not measured: ResNet-50's rate × the ratio of the two networks' GFLOPS per 224² image (torchvision's model pages:
# 4.09 and 1.81). A smaller network is less bound by compute, so the real rate may well be lower.
RESNET18_IMAGES_PER_S = RESNET50_IMAGES_PER_S.value * 4.09 / 1.81

FIGURES = (NODE_SAMPLES_PER_S, *(figure for _, figure in SIZE_CURVE), *(figure for _, figure in NODE_CPU_MS_PER_ROW),
           TLS_VS_PLAIN, DECODE_CPU_MS_PER_IMAGE, DECODE_JPEG_BYTES, RESNET50_IMAGES_PER_S)

REQUEST_BYTES = 512 * 1024  # the loader's default request_bytes (ringfeed.loader.options.LoaderOptions)
# A ring is sized so that no node runs above the autoscaler's scale-up bound, and both bounds are these shares of a
# node's saturated reads. Down is below half of up: removing one node of two at that load leaves the other below
# the scale-up bound (the worst case), so the autoscaler does not flap.
SCALE_UP_PERCENT = 75
SCALE_DOWN_PERCENT = 30
CONSISTENCY_LEVELS = ("ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "ALL")  # a TrainingJob's spec.loader.consistency
RING_MAX_NODES = 100  # a Ring's spec.maxNodes at most (crds/ringfeed.io_rings.yaml); beyond it, an external ring
SEARCH_LIMIT_NODES = 100_000

# What a sizing may assume beyond the measured figures (`beyond_measured` returns the keys).
ASSUMPTIONS = {
    "N": "nodes add up: n nodes serve n × one node's rate (never measured beyond one node)",
    "S": "the sample size is not 20 kB: the size curve, measured on 16 shared cores, interpolated between 20 and "
         "150 kB or extrapolated beyond them",
    "R": "requests smaller than the loader's 512 KiB (batches spread over many nodes): the node's CPU per row at "
         "that many rows, measured with 20 kB rows on 2 shared cores",
    "Q": "a consistency level above ONE: every replica it asks reads the row (not measured)",
    "C": "nodes of other than 2 CPUs: the rate scaled linearly with CPUs (not measured)",
    "T": "TLS: the node's rate × the loader's TLS ÷ plain-text ratio, measured with node and loader on 16 shared cores",
}


class CapacityError(ValueError):
    """An input the model cannot size for, said in one line."""


def _positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise CapacityError(f"{name} must be positive, got {value}")


def rows_per_request(sample_bytes: int, batch_size: int, nodes: int) -> float:
    """Mean samples per read request: each batch's share of one node, cut into requests of REQUEST_BYTES (at least
    one sample each), as the loader groups them."""
    _positive(sample_bytes=sample_bytes, batch_size=batch_size, nodes=nodes)
    full = max(1, REQUEST_BYTES // sample_bytes)
    share = max(1.0, batch_size / nodes)
    return max(1.0, share / math.ceil(share / full))  # a fractional share of 1-sample requests still reads 1


def node_cpu_ms_per_row(rows: float) -> float:
    """A node's CPU per row at `rows` per request: the measured points joined linearly in 1/rows (a cost per
    request shared by its rows, and one per row), flat beyond the largest."""
    if rows < 1:
        raise CapacityError(f"rows per request must be at least 1, got {rows}")
    points = [(1 / count, figure.value) for count, figure in NODE_CPU_MS_PER_ROW]  # 1/rows falling
    if 1 / rows <= points[-1][0]:
        return points[-1][1]
    (x_high, y_high), (x_low, y_low) = next(
        (high, low) for high, low in zip(points, points[1:], strict=False) if 1 / rows >= low[0])
    return y_low + (y_high - y_low) * (1 / rows - x_low) / (x_high - x_low)


def _seconds_per_sample(sample_bytes: int) -> float:
    """The size curve: the line through the measured points' seconds per sample (a cost per sample and one per
    byte)."""
    (small_bytes, small), (large_bytes, large) = SIZE_CURVE
    per_byte = (1 / large.value - 1 / small.value) / (large_bytes - small_bytes)
    return 1 / small.value + per_byte * (sample_bytes - small_bytes)


def _measured_rows_per_request(sample_bytes: int) -> float:
    """The rows per request of the measured node: batches of 256, one node."""
    return rows_per_request(sample_bytes, MEASURED_BATCH_SIZE, 1)


@dataclasses.dataclass(frozen=True)
class Node:
    """A ring node: its CPUs, and whether its clients speak TLS (a Ring's always do)."""

    cpus: int = MEASURED_NODE_CPUS
    tls: bool = True

    def __post_init__(self) -> None:
        _positive(cpus=self.cpus)


RING_NODE = Node()  # what the operator provisions, at the size of the measured node
MEASURED_NODE = Node(tls=False)


def node_capacity(sample_bytes: int, batch_size: int = MEASURED_BATCH_SIZE, nodes: int = 1,
                  node: Node = RING_NODE) -> float:
    """Samples/s one `node` serves when saturated, in a ring of `nodes` read in batches of `batch_size`."""
    size = _seconds_per_sample(MEASURED_SAMPLE_BYTES) / _seconds_per_sample(sample_bytes)
    requests = node_cpu_ms_per_row(_measured_rows_per_request(sample_bytes)) / node_cpu_ms_per_row(
        rows_per_request(sample_bytes, batch_size, nodes))
    tls = TLS_VS_PLAIN.value if node.tls else 1.0
    return NODE_SAMPLES_PER_S.value * size * requests * tls * node.cpus / MEASURED_NODE_CPUS


def replicas_read(rf: int, consistency: str = "ONE") -> int:
    """Replicas that read each row at this consistency level: one at ONE (the loader's default), a quorum of the
    rf at QUORUM, all rf at ALL."""
    _positive(rf=rf)
    if consistency not in CONSISTENCY_LEVELS:
        raise CapacityError(f"consistency must be one of {', '.join(CONSISTENCY_LEVELS)}, got {consistency!r}")
    if consistency.endswith("ONE"):
        return 1
    return rf // 2 + 1 if consistency.endswith("QUORUM") else rf


@dataclasses.dataclass(frozen=True)
class Load:
    """A training load: `gpus` that each train on `images_per_s_per_gpu` samples of `sample_bytes`, read by one
    loader per GPU in batches of `batch_size`, from a Dataset at replication factor `rf`."""

    gpus: int
    images_per_s_per_gpu: float
    sample_bytes: int
    rf: int = 1
    batch_size: int = MEASURED_BATCH_SIZE
    consistency: str = "ONE"

    def __post_init__(self) -> None:
        _positive(gpus=self.gpus, images_per_s_per_gpu=self.images_per_s_per_gpu, sample_bytes=self.sample_bytes,
                  batch_size=self.batch_size)
        replicas_read(self.rf, self.consistency)

    @property
    def row_reads_per_s(self) -> float:
        """Row reads per second across the ring: every image once, on each replica the consistency level asks."""
        return self.gpus * self.images_per_s_per_gpu * replicas_read(self.rf, self.consistency)


def node_load(load: Load, nodes: int, node: Node = RING_NODE) -> float:
    """Each node's load as a share of its saturated rate (1.0: saturated). A ring of fewer nodes than the
    replication factor is refused: it cannot hold the replicas."""
    _positive(nodes=nodes)
    if nodes < load.rf:
        raise CapacityError(f"a ring of {nodes} nodes cannot hold {load.rf} replicas (rf > nodes)")
    return load.row_reads_per_s / (nodes * node_capacity(load.sample_bytes, load.batch_size, nodes, node))


def nodes_for(load: Load, node: Node = RING_NODE) -> int:
    """The least ring, of at least rf nodes, whose nodes each run at most at SCALE_UP_PERCENT of their saturated
    rate."""
    for nodes in range(load.rf, SEARCH_LIMIT_NODES + 1):
        if node_load(load, nodes, node) * 100 <= SCALE_UP_PERCENT:
            return nodes
    raise CapacityError(f"more than {SEARCH_LIMIT_NODES:,} nodes of {node.cpus} CPUs for {load}")


def sidecar_cores_per_gpu(images_per_s_per_gpu: float, sample_bytes: int) -> float:
    """CPU cores that one GPU's loader sidecar needs to read and decode its images with CPU decode (decode device
    gpu moves the decode to the GPU, not measured yet): the measured CPU per image, scaled by the JPEG's size."""
    _positive(images_per_s_per_gpu=images_per_s_per_gpu, sample_bytes=sample_bytes)
    return images_per_s_per_gpu * DECODE_CPU_MS_PER_IMAGE.value / 1000 * sample_bytes / DECODE_JPEG_BYTES.value


def node_reads_per_s(sample_bytes: int = MEASURED_SAMPLE_BYTES, batch_size: int = MEASURED_BATCH_SIZE,
                     nodes: int = 1, node: Node = RING_NODE) -> float:
    """The autoscaler's ReadsPerSecondPerNode of a saturated node: the read requests it coordinates per second,
    each one of the loader's multi-row requests."""
    return (node_capacity(sample_bytes, batch_size, nodes, node)
            / rows_per_request(sample_bytes, batch_size, nodes))


def autoscaling_bounds(sample_bytes: int = MEASURED_SAMPLE_BYTES, batch_size: int = MEASURED_BATCH_SIZE,
                       nodes: int = 1, node: Node = RING_NODE) -> tuple[int, int]:
    """(scaleUpAbove, scaleDownBelow) for ReadsPerSecondPerNode: SCALE_UP_PERCENT and SCALE_DOWN_PERCENT of a
    saturated node's reads/s. With no arguments, at the measured node: the Ring's defaults."""
    reads = node_reads_per_s(sample_bytes, batch_size, nodes, node)
    return math.floor(reads * SCALE_UP_PERCENT / 100), math.floor(reads * SCALE_DOWN_PERCENT / 100)


def beyond_measured(load: Load, nodes: int, node: Node = RING_NODE) -> list[str]:
    """The keys of ASSUMPTIONS that sizing `load` on `nodes` rests on (empty: on measured figures only)."""
    assumed = []
    if nodes > 1:
        assumed.append("N")
    if load.sample_bytes != MEASURED_SAMPLE_BYTES:
        assumed.append("S")
    rows = rows_per_request(load.sample_bytes, load.batch_size, nodes)
    if node_cpu_ms_per_row(rows) > node_cpu_ms_per_row(_measured_rows_per_request(load.sample_bytes)):
        assumed.append("R")
    if replicas_read(load.rf, load.consistency) > 1:
        assumed.append("Q")
    if node.cpus != MEASURED_NODE_CPUS:
        assumed.append("C")
    if node.tls:
        assumed.append("T")
    return assumed


# -- the worked examples, the plot and its numbers --------------------------------------------------------------------

MODELS = (("ResNet-50", RESNET50_IMAGES_PER_S.value), ("ResNet-18 (estimated)", RESNET18_IMAGES_PER_S))
EXAMPLE_GPUS = (8, 64, 256)
EXAMPLE_SAMPLE_BYTES = (20_000, 110_000)
# The ring columns: (heading, rf, consistency, node).
EXAMPLE_RINGS = (("RF 1", 1, "ONE", RING_NODE), ("RF 3", 3, "ONE", RING_NODE), ("RF 3, QUORUM", 3, "QUORUM", RING_NODE),
                 ("RF 3, 16-CPU nodes", 3, "ONE", Node(cpus=16)))


def _sized(load: Load, node: Node) -> str:
    """Ring nodes, with the keys of what they assume."""
    nodes = nodes_for(load, node)
    return f"{nodes} {''.join(beyond_measured(load, nodes, node))}".rstrip()


def examples_table() -> str:
    """The worked examples as a Markdown table (docs/capacity.md holds it as printed here)."""
    headings = " | ".join(heading for heading, *_ in EXAMPLE_RINGS)
    lines = [f"| model | GPUs | sample | images/s | {headings} | sidecar cores per GPU |",
             "|---|---|---|---|" + "---|" * len(EXAMPLE_RINGS) + "---|"]
    for model, rate in MODELS:
        for sample_bytes in EXAMPLE_SAMPLE_BYTES:
            for gpus in EXAMPLE_GPUS:
                rings = " | ".join(_sized(Load(gpus, rate, sample_bytes, rf, consistency=consistency), node)
                                   for _, rf, consistency, node in EXAMPLE_RINGS)
                lines.append(f"| {model} | {gpus} | {sample_bytes // 1000} kB | {gpus * rate:,.0f} | {rings} | "
                             f"{sidecar_cores_per_gpu(rate, sample_bytes):.1f} |")
    return "\n".join(lines)


PLOT_GPUS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
NODE_SERIES = (("plain text, as measured", MEASURED_NODE), ("TLS, as a Ring's", RING_NODE))
PLOT_SAMPLE_BYTES = (5_000, 10_000, 20_000, 40_000, 80_000, 110_000, 150_000, 200_000, 300_000)
SIZE_TICKS_KB = (5, 10, 20, 50, 110, 300)


def plot_rows() -> list[dict[str, str]]:
    """The plot's numbers, one row per point: panel, series, x, y, and what the point assumes (ASSUMPTIONS' keys;
    for the sidecar, `scaled` where the JPEG is not the measured 20.5 kB)."""
    rows = []
    for series, node in NODE_SERIES:
        for sample_bytes in PLOT_SAMPLE_BYTES:
            rows.append({"panel": "node samples/s", "series": series, "x": str(sample_bytes),
                         "y": f"{node_capacity(sample_bytes, node=node):.0f}",
                         "assumes": "".join(beyond_measured(Load(1, 1.0, sample_bytes), 1, node))})
    for model, rate in MODELS:
        for sample_bytes in EXAMPLE_SAMPLE_BYTES:
            for gpus in PLOT_GPUS:
                load = Load(gpus, rate, sample_bytes)
                nodes = nodes_for(load)
                rows.append({"panel": "ring nodes", "series": f"{model}, {sample_bytes // 1000} kB", "x": str(gpus),
                             "y": str(nodes), "assumes": "".join(beyond_measured(load, nodes))})
    for model, rate in MODELS:
        for sample_bytes in PLOT_SAMPLE_BYTES:
            rows.append({"panel": "sidecar cores per GPU", "series": model, "x": str(sample_bytes),
                         "y": f"{sidecar_cores_per_gpu(rate, sample_bytes):.2f}",
                         "assumes": "" if sample_bytes == DECODE_JPEG_BYTES.value else "scaled"})
    return rows


def numbers_csv() -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, ["panel", "series", "x", "y", "assumes"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(plot_rows())
    return out.getvalue()


def write_plot(path: Path) -> None:
    """Three panels from plot_rows(): a node's samples/s against the sample's size, ring nodes against GPUs, sidecar
    cores per GPU against the JPEG's size; measured points in black. The SVG is the same from run to run."""
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    matplotlib.rcParams["svg.hashsalt"] = "ringfeed-capacity"  # fixed element ids
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: a small file
    rows = plot_rows()

    def points(panel: str, series: str) -> tuple[list[float], list[float]]:
        chosen = [row for row in rows if row["panel"] == panel and row["series"] == series]
        return [float(row["x"]) for row in chosen], [float(row["y"]) for row in chosen]

    def kilobytes(values: list[float]) -> list[float]:
        return [value / 1000 for value in values]

    figure, (sizes, rings, cores) = plt.subplots(1, 3, figsize=(15, 4.6))

    for series, _ in NODE_SERIES:
        x, y = points("node samples/s", series)
        sizes.plot(kilobytes(x), y, label=series)
    sizes.axvspan(SIZE_CURVE[0][0] / 1000, SIZE_CURVE[-1][0] / 1000, color="0.92",
                  label="size curve measured (bench-wan, 16 cores)")
    sizes.plot([MEASURED_SAMPLE_BYTES / 1000], [NODE_SAMPLES_PER_S.value], "o", color="black",
               label="measured (bench-ring-nodes)")
    sizes.set(xscale="log", yscale="log", xlabel="sample size (kB)", ylabel="samples/s",
              title="One node's saturated rate (2 CPUs)")
    sizes.set_yticks((2_000, 5_000, 10_000, 20_000, 40_000))
    sizes.legend(fontsize=8)

    for series in dict.fromkeys(row["series"] for row in rows if row["panel"] == "ring nodes"):
        rings.plot(*points("ring nodes", series), marker=".", label=series)
    rings.axhline(RING_MAX_NODES, color="0.5", linestyle=":", label=f"a Ring's maximum ({RING_MAX_NODES})")
    rings.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="ring nodes of 2 CPUs",
              title=f"Ring nodes at ≤ {SCALE_UP_PERCENT} % load (TLS, RF 1, batches of {MEASURED_BATCH_SIZE})")
    rings.set_xticks(PLOT_GPUS, [str(gpus) for gpus in PLOT_GPUS])
    rings.text(0.02, 0.97, "beyond 1 node: extrapolated", transform=rings.transAxes, va="top", fontsize=8)
    rings.legend(fontsize=8, loc="lower right")

    for model, _ in MODELS:
        x, y = points("sidecar cores per GPU", model)
        cores.plot(kilobytes(x), y, label=model)
    cores.plot([DECODE_JPEG_BYTES.value / 1000],
               [sidecar_cores_per_gpu(RESNET50_IMAGES_PER_S.value, int(DECODE_JPEG_BYTES.value))], "o",
               color="black", label="measured CPU per image (bench-loader)")
    cores.set(xscale="log", yscale="log", xlabel="JPEG size (kB)", ylabel="cores",
              title="Sidecar cores per GPU (CPU decode)")
    cores.legend(fontsize=8)

    plain = FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}")
    for axes in (sizes, cores):
        axes.set_xticks(SIZE_TICKS_KB, [str(kb) for kb in SIZE_TICKS_KB])
    for axes in (sizes, rings, cores):
        axes.yaxis.set_major_formatter(plain)
        axes.grid(True, which="both", color="0.9")
    figure.tight_layout()
    figure.savefig(path, format="svg", metadata={"Date": None})
    plt.close(figure)


def print_figures() -> None:
    print("Figures (docs/benchmarks.md):")
    for figure in FIGURES:
        print(f"  {figure.value:>10,.2f}  {figure.what}  [{figure.section}; {figure.machine}]")
    print(f"  {RESNET18_IMAGES_PER_S:>10,.2f}  images/s of ResNet-18: not measured; ResNet-50's × 4.09 / 1.81 GFLOPS")


def print_load(load: Load, node: Node) -> None:
    nodes = nodes_for(load, node)
    up, down = autoscaling_bounds(load.sample_bytes, load.batch_size, nodes, node)
    print(f"{load.row_reads_per_s:,.0f} row reads/s → {nodes} nodes of {node.cpus} CPUs, each at "
          f"{node_load(load, nodes, node):.0%} of its saturated rate; "
          f"{sidecar_cores_per_gpu(load.images_per_s_per_gpu, load.sample_bytes):.1f} sidecar cores per GPU; "
          f"autoscaling at {nodes} nodes: scaleUpAbove {up}, scaleDownBelow {down}")
    for key in beyond_measured(load, nodes, node):
        print(f"  assumes {key}: {ASSUMPTIONS[key]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, help="Size this load instead of the worked examples.")
    parser.add_argument("--images-per-s", type=float, default=RESNET50_IMAGES_PER_S.value, help="Per GPU.")
    parser.add_argument("--sample-bytes", type=int, default=MEASURED_SAMPLE_BYTES)
    parser.add_argument("--rf", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=MEASURED_BATCH_SIZE, help="Per GPU.")
    parser.add_argument("--consistency", default="ONE", choices=CONSISTENCY_LEVELS)
    parser.add_argument("--node-cpus", type=int, default=MEASURED_NODE_CPUS)
    parser.add_argument("--plain-text", action="store_true", help="An external ring read without TLS.")
    args = parser.parse_args()
    if args.gpus is not None:
        try:
            print_load(Load(args.gpus, args.images_per_s, args.sample_bytes, args.rf, args.batch_size,
                            args.consistency), Node(args.node_cpus, tls=not args.plain_text))
        except CapacityError as error:
            parser.error(str(error))
        return 0

    print_figures()
    up, down = autoscaling_bounds()
    print(f"\nA saturated Ring node (2 CPUs, TLS): {node_capacity(MEASURED_SAMPLE_BYTES):,.0f} samples/s of 20 kB in "
          f"{rows_per_request(MEASURED_SAMPLE_BYTES, MEASURED_BATCH_SIZE, 1):g} rows per request = "
          f"{node_reads_per_s():,.0f} reads/s; the Ring's autoscaler defaults: scaleUpAbove {up} "
          f"({SCALE_UP_PERCENT} %), scaleDownBelow {down} ({SCALE_DOWN_PERCENT} %)\n")
    print(examples_table())
    print("\nRing nodes are followed by what they assume beyond the measured figures:")
    for key, assumption in ASSUMPTIONS.items():
        print(f"  {key}  {assumption}")
    NUMBERS.write_text(numbers_csv())
    write_plot(PLOT)
    print(f"\nwrote {PLOT.relative_to(REPO)} and {NUMBERS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
