"""LoaderOptions: every bad value is refused once, at construction, with a message that names it."""

import dataclasses

import pytest

from ringfeed import LoaderOptions, RingfeedError
from ringfeed.loader import Decode, LoaderOptionsError


@pytest.mark.parametrize("fields, message", [
    (dict(batch_size=0), "batch_size must be at least 1, got 0"),
    (dict(batch_size=8.0), "batch_size must be an integer, got 8.0"),
    (dict(batch_size=True), "batch_size must be an integer, got True"),
    (dict(world_size=0), "world_size must be at least 1, got 0"),
    (dict(rank=2, world_size=2), "rank must be in [0, 2), got 2"),
    (dict(rank=-1), "rank must be in [0, 1), got -1"),
    (dict(seed=-1), "seed must be in [0, 2**64), got -1"),
    (dict(seed=2**64), f"seed must be in [0, 2**64), got {2**64}"),
    (dict(remainder="wrap"), "unknown remainder policy 'wrap' (one of uneven, pad, drop)"),
    (dict(prefetch=0), "prefetch must be at least 1, got 0"),
    (dict(concurrency=0), "concurrency must be at least 1, got 0"),
    (dict(request_bytes=0), "request_bytes must be at least 1, got 0"),
    (dict(memory_bytes=2**20), "memory_bytes must be at least 33554432 (32 MiB), got 1048576"),
    (dict(decode_threads=-1), "decode_threads must be zero or more, got -1"),
    (dict(max_retries=-1), "max_retries must be zero or more, got -1"),
    (dict(missing="ignore"), "unknown missing policy 'ignore' (one of raise, skip)"),
    (dict(consistency="SERIAL"),
     "unknown consistency 'SERIAL' (one of ONE, TWO, LOCAL_ONE, QUORUM, LOCAL_QUORUM, ALL)"),
    (dict(decode="jpeg"), "decode must be None, 'tensor' or a ringfeed.Decode, got 'jpeg'"),
    (dict(decode=(224, 224)), "decode must be None, 'tensor' or a ringfeed.Decode, got (224, 224)"),
    (dict(shard=(2, 2)), "shard must be (index, count) with 0 <= index < count, got (2, 2)"),
    (dict(shard=(0,)), "shard must be (index, count) with 0 <= index < count, got (0,)"),
])
def test_bad_values_are_refused_with_a_clear_message(fields, message):
    with pytest.raises(LoaderOptionsError) as error:
        LoaderOptions(**fields)
    assert str(error.value) == message
    with pytest.raises(LoaderOptionsError):  # the keyword form goes through the same check
        LoaderOptions.build(**fields)


@pytest.mark.parametrize("decode, message", [
    (dict(height=0, width=10), "decode size must be positive, got 0x10"),
    (dict(height=10, width=10, channels=4), "decode channels must be 1 or 3, got 4"),
])
def test_bad_decode_sizes_are_refused(decode, message):
    with pytest.raises(LoaderOptionsError, match=message):
        Decode(**decode)


def test_defaults_are_those_documented():
    options = LoaderOptions()
    assert (options.batch_size, options.decode, options.shuffle, options.seed) == (64, None, True, 0)
    assert (options.rank, options.world_size, options.remainder) == (0, 1, "pad")
    assert (options.prefetch, options.concurrency, options.request_bytes) == (2, 128, 512 * 1024)
    assert options.memory_bytes == 128 * 2**20
    assert (options.decode_threads, options.consistency, options.missing, options.max_retries) == (0, "ONE", "raise", 8)
    assert not (options.out_of_order or options.with_uuids)
    assert options.shard == (0, 1)


def test_good_values_are_kept_and_the_object_is_frozen():
    options = LoaderOptions(batch_size=1, decode=Decode(224, 224), seed=2**64 - 1, rank=3, world_size=4,
                            remainder="pad", max_retries=0, consistency="local_quorum")
    assert options.decode == Decode(224, 224) and (options.rank, options.world_size) == (3, 4)
    assert LoaderOptions(decode="tensor").decode == "tensor"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch_size = 2  # type: ignore[misc]


def test_keywords_build_the_same_object_and_change_a_given_one():
    assert LoaderOptions.build(batch_size=32, seed=5) == LoaderOptions(batch_size=32, seed=5)
    assert LoaderOptions.build() == LoaderOptions()
    base = LoaderOptions(batch_size=32, seed=5)
    assert LoaderOptions.build(base, seed=6) == LoaderOptions(batch_size=32, seed=6)
    assert LoaderOptions.build(base) == base and base.seed == 5  # the given object is left as it was
    with pytest.raises(LoaderOptionsError) as error:
        LoaderOptions.build(batch_sise=32, sead=1)
    assert str(error.value) == "unknown loader option(s): batch_sise, sead"
    with pytest.raises(LoaderOptionsError, match="options must be a ringfeed.LoaderOptions, got dict"):
        LoaderOptions.build({"batch_size": 32})


def test_the_error_is_a_ringfeed_error():
    assert issubclass(LoaderOptionsError, RingfeedError)


@pytest.mark.parametrize(("window_mib", "rmem_mib", "tls", "expected"), [
    (64, 32, False, 2),   # the link alone: 2 receive buffers
    (64, 32, True, 8),    # TLS: the cipher work on 8 cores of either side
    (64, 6, False, 8),    # a long link: 11, capped at 8
    (1, 6, False, 1),
    (1, 6, True, 8),
])
def test_connections_per_node_covers_the_link_and_spreads_tls(monkeypatch, tmp_path, window_mib, rmem_mib, tls,
                                                              expected):
    import ringfeed.loader.loader as loader_module

    rmem = tmp_path / "tcp_rmem"
    rmem.write_text(f"4096 131072 {rmem_mib * 1024 * 1024}\n")
    real_path = loader_module.Path
    monkeypatch.setattr(loader_module, "Path", lambda p: rmem if p == "/proc/sys/net/ipv4/tcp_rmem" else real_path(p))
    assert loader_module.connections_per_node(window_mib * 1024 * 1024, tls=tls) == expected
