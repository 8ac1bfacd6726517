"""benchmarks/capacity_model.py: its figures are docs/benchmarks.md's, its pure functions behave over classes of
input (the measured point, more GPUs, more nodes, rf against nodes, bad values), and docs/capacity.md, .csv show
what it computes now (`make capacity` was run after the last change)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))
from capacity_model import (  # noqa: E402
    FIGURES,
    MEASURED_NODE,
    NODE_CPU_MS_PER_ROW,
    NODE_SAMPLES_PER_S,
    RESNET50_IMAGES_PER_S,
    SCALE_UP_PERCENT,
    SIZE_CURVE,
    TLS_VS_PLAIN,
    CapacityError,
    Load,
    Node,
    autoscaling_bounds,
    beyond_measured,
    examples_table,
    node_capacity,
    node_cpu_ms_per_row,
    node_load,
    node_reads_per_s,
    nodes_for,
    numbers_csv,
    replicas_read,
    rows_per_request,
    sidecar_cores_per_gpu,
)

NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
RESNET50 = RESNET50_IMAGES_PER_S.value


def section(markdown: str, heading: str) -> str:
    """The text under `## heading`, to the next `## `."""
    start = markdown.index(f"\n## {heading}\n")
    following = markdown.find("\n## ", start + 1)
    return markdown[start:following if following != -1 else len(markdown)]


@pytest.mark.parametrize("figure", FIGURES, ids=[f"{f.section} {f.written}" for f in FIGURES])
def test_every_figure_is_written_in_its_section_of_the_benchmarks_page(figure):
    text = section((REPO / "docs" / "benchmarks.md").read_text(), figure.section)
    assert figure.written in text
    quoted = [float(n.replace(",", "")) for n in NUMBER.findall(figure.written.split(" with ")[0])]
    scale = 1000 if "kB" in figure.written else 1
    assert figure.value == pytest.approx(sum(quoted) / len(quoted) * scale)  # a range by its middle


# -- the measured point -----------------------------------------------------------------------------------------------

def test_the_measured_node_is_the_model_at_its_own_conditions():
    assert node_capacity(20_000, 256, 1, MEASURED_NODE) == NODE_SAMPLES_PER_S.value
    assert rows_per_request(20_000, 256, 1) == pytest.approx(25.6)  # 256 samples in 10 requests of ≤ 26
    assert node_reads_per_s(node=MEASURED_NODE) == pytest.approx(720)
    assert beyond_measured(Load(1, RESNET50, 20_000), 1, MEASURED_NODE) == []


def test_a_rings_node_speaks_tls_at_the_measured_ratio_and_says_so():
    assert node_capacity(20_000) == pytest.approx(NODE_SAMPLES_PER_S.value * TLS_VS_PLAIN.value)
    assert beyond_measured(Load(1, RESNET50, 20_000), 1) == ["T"]
    assert nodes_for(Load(64, RESNET50, 20_000)) >= nodes_for(Load(64, RESNET50, 20_000), MEASURED_NODE)


def test_the_autoscaling_defaults_are_shares_of_a_saturated_tls_nodes_reads():
    assert node_reads_per_s() == pytest.approx(720 * TLS_VS_PLAIN.value)
    assert autoscaling_bounds() == (477, 191)
    up, down = autoscaling_bounds()
    assert 2 * down < up  # one node of two removed at the scale-down bound stays below the scale-up bound


def test_the_size_curve_goes_through_its_measured_ratio_and_falls_with_size():
    (small_bytes, small), (large_bytes, large) = SIZE_CURVE
    assert node_capacity(large_bytes) / node_capacity(small_bytes) == pytest.approx(large.value / small.value,
                                                                                    rel=0.01)
    rates = [node_capacity(size) for size in (1_000, 5_000, 20_000, 110_000, 150_000, 1_000_000)]
    assert rates == sorted(rates, reverse=True)


def test_a_nodes_cpu_per_row_falls_with_the_rows_of_a_request_and_is_flat_beyond_the_last_measured():
    for rows, figure in NODE_CPU_MS_PER_ROW:
        assert node_cpu_ms_per_row(rows) == pytest.approx(figure.value)
    costs = [node_cpu_ms_per_row(rows) for rows in (1, 1.5, 4, 8, 16, 24, 26, 1000)]
    assert costs == sorted(costs, reverse=True)
    assert node_cpu_ms_per_row(1000) == node_cpu_ms_per_row(24)
    with pytest.raises(CapacityError, match="at least 1"):
        node_cpu_ms_per_row(0.5)


# -- more GPUs, more nodes --------------------------------------------------------------------------------------------

def test_requests_shrink_as_a_batch_spreads_over_more_nodes():
    rows = [rows_per_request(20_000, 256, nodes) for nodes in (1, 2, 4, 16, 64, 256, 1000)]
    assert rows == sorted(rows, reverse=True) and rows[-1] == 1
    assert rows_per_request(150_000, 256, 1) <= 3  # 512 KiB requests hold 3 samples of 150 kB
    assert rows_per_request(1_000_000, 256, 1) == 1  # a sample larger than a request is read alone
    assert node_capacity(20_000, 256, 100) < node_capacity(20_000, 256, 1)  # smaller requests cost the node more


@pytest.mark.parametrize("sample_bytes", [5_000, 20_000, 110_000, 300_000])
@pytest.mark.parametrize("rf,consistency", [(1, "ONE"), (3, "ONE"), (3, "QUORUM")])
def test_ring_nodes_never_fall_as_gpus_are_added(sample_bytes, rf, consistency):
    sizes = [nodes_for(Load(gpus, RESNET50, sample_bytes, rf, consistency=consistency)) for gpus in range(1, 300, 7)]
    assert sizes == sorted(sizes)
    assert min(sizes) >= rf


@pytest.mark.parametrize("gpus", [1, 8, 64, 256])
def test_the_ring_sized_is_the_least_under_the_scale_up_share(gpus):
    load = Load(gpus, RESNET50, 110_000, rf=2)
    nodes = nodes_for(load)
    assert node_load(load, nodes) * 100 <= SCALE_UP_PERCENT
    if nodes > load.rf:
        assert node_load(load, nodes - 1) * 100 > SCALE_UP_PERCENT


def test_rf_sets_the_floor_and_reads_at_one_go_to_one_replica():
    assert nodes_for(Load(1, 100, 20_000, rf=3)) == 3
    assert nodes_for(Load(64, RESNET50, 20_000, rf=3)) == nodes_for(Load(64, RESNET50, 20_000, rf=1))
    assert nodes_for(Load(64, RESNET50, 20_000, rf=3, consistency="QUORUM")) > nodes_for(
        Load(64, RESNET50, 20_000, rf=3))


@pytest.mark.parametrize("rf,consistency,replicas", [
    (1, "ONE", 1), (3, "LOCAL_ONE", 1), (3, "QUORUM", 2), (5, "LOCAL_QUORUM", 3), (3, "ALL", 3), (1, "QUORUM", 1)])
def test_replicas_read_by_consistency_level(rf, consistency, replicas):
    assert replicas_read(rf, consistency) == replicas


def test_larger_nodes_mean_fewer_of_them_and_say_so():
    load = Load(256, RESNET50, 20_000, rf=3)
    large = Node(cpus=16)
    assert nodes_for(load, large) < nodes_for(load)
    assert "C" in beyond_measured(load, nodes_for(load, large), large)


def test_what_a_sizing_assumes_beyond_the_measured_figures():
    assert beyond_measured(Load(64, RESNET50, 20_000), 25, MEASURED_NODE) == ["N", "R"]
    assert beyond_measured(Load(1, RESNET50, 110_000), 1, MEASURED_NODE) == ["S"]
    assert beyond_measured(Load(8, RESNET50, 20_000, rf=3, consistency="ALL"), 3) == ["N", "R", "Q", "T"]


# -- the sidecar ------------------------------------------------------------------------------------------------------

def test_sidecar_cores_are_the_measured_cpu_per_image_scaled_by_rate_and_size():
    assert sidecar_cores_per_gpu(RESNET50, 20_500) == pytest.approx(RESNET50 * 0.58e-3)
    assert sidecar_cores_per_gpu(2 * RESNET50, 20_500) == pytest.approx(2 * sidecar_cores_per_gpu(RESNET50, 20_500))
    assert sidecar_cores_per_gpu(RESNET50, 41_000) == pytest.approx(2 * sidecar_cores_per_gpu(RESNET50, 20_500))


# -- refused inputs ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arguments,message", [
    ({"gpus": 0}, "gpus must be positive, got 0"),
    ({"gpus": -8}, "gpus must be positive, got -8"),
    ({"images_per_s_per_gpu": 0}, "images_per_s_per_gpu must be positive"),
    ({"sample_bytes": -1}, "sample_bytes must be positive"),
    ({"rf": 0}, "rf must be positive"),
    ({"batch_size": 0}, "batch_size must be positive"),
    ({"consistency": "TWO"}, "consistency must be one of ONE, LOCAL_ONE, QUORUM, LOCAL_QUORUM, ALL, got 'TWO'"),
])
def test_a_bad_load_is_refused_in_one_line(arguments, message):
    with pytest.raises(CapacityError, match=re.escape(message)):
        Load(**{"gpus": 8, "images_per_s_per_gpu": RESNET50, "sample_bytes": 20_000, **arguments})


def test_a_ring_smaller_than_the_replication_factor_is_refused():
    with pytest.raises(CapacityError, match=re.escape("a ring of 2 nodes cannot hold 3 replicas (rf > nodes)")):
        node_load(Load(8, RESNET50, 20_000, rf=3), 2)
    with pytest.raises(CapacityError, match="nodes must be positive"):
        node_load(Load(8, RESNET50, 20_000), 0)


@pytest.mark.parametrize("call,message", [
    (lambda: sidecar_cores_per_gpu(0, 20_000), "images_per_s_per_gpu must be positive"),
    (lambda: sidecar_cores_per_gpu(RESNET50, 0), "sample_bytes must be positive"),
    (lambda: Node(cpus=0), "cpus must be positive"),
    (lambda: rows_per_request(20_000, 256, 0), "nodes must be positive"),
    (lambda: nodes_for(Load(10**9, 10**6, 20_000)), "more than 100,000 nodes"),
])
def test_other_bad_values_are_refused_in_one_line(call, message):
    with pytest.raises(CapacityError, match=message):
        call()


# -- the page shows what the model computes ---------------------------------------------------------------------------

def test_the_capacity_page_and_its_numbers_are_the_models_output():
    page = (REPO / "docs" / "capacity.md").read_text()
    assert examples_table() in page, "run make capacity and paste its table into docs/capacity.md"
    assert (REPO / "docs" / "capacity.csv").read_text() == numbers_csv(), "run make capacity"
    assert "capacity.svg" in page and (REPO / "docs" / "capacity.svg").is_file()
