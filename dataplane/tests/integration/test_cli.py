"""The `ringfeed` command as users run it: real process, real node, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ringfeed.demo import make_demo_set
from ringfeed.ids import sample_uuid
from ringfeed.loader import LoaderSource

from conftest import ingest_demo_slides

RINGFEED = str(Path(sys.executable).with_name("ringfeed"))


def run(node, *args, check=True, env=None):
    env = {**os.environ, "RINGFEED_HOSTS": ",".join(node.hosts), "COLUMNS": "160", **(env or {})}
    proc = subprocess.run([RINGFEED, *args], capture_output=True, text=True, env=env)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_help_explains_the_commands():
    out = subprocess.run([RINGFEED, "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("local", "dataset", "ingest", "datasets", "inspect", "get", "split", "demo"):
        assert command in out
    ingest_help = subprocess.run([RINGFEED, "ingest", "--help"], capture_output=True, text=True, check=True).stdout
    assert "ImageFolder" in ingest_help and "WebDataset" in ingest_help


def test_create_ingest_list_inspect_get(cassandra_node, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=3)
    run(cassandra_node, "dataset", "create", dataset_name, "--key", "patient_id", "--key", "slide_num:int",
        "--key", "x:int", "--key", "y:int", "--meta", "scanner", "--encoding", "jpeg",
        "--label-names", "normal,tumor")
    out = run(cassandra_node, "ingest", dataset_name, str(demo.manifest)).stdout
    assert f"ingested {demo.images:,} samples" in out
    assert "rejected 5 inputs: corrupt 3, unreadable 1, bad metadata 1" in out
    assert "truncated JPEG" in out and "tumor" in out

    listing = run(cassandra_node, "datasets").stdout
    assert dataset_name in listing and f"{demo.images:,}" in listing
    inspected = run(cassandra_node, "inspect", dataset_name).stdout
    assert "natural key: patient_id text, slide_num int, x int, y int" in inspected
    assert f"samples: {demo.images:,}" in inspected

    first = demo.manifest.read_text().splitlines()[1].split(",")
    uid = sample_uuid(dataset_name, (first[1], int(first[2]), int(first[3]), int(first[4])))
    target = tmp_path / "out.jpg"
    run(cassandra_node, "get", dataset_name, str(uid), "-o", str(target))
    assert target.read_bytes() == (tmp_path / first[0]).read_bytes()


def test_errors_are_one_line_with_non_zero_exit(cassandra_node, dataset_name, tmp_path):
    cases = [
        (["ingest", dataset_name, str(tmp_path)], f"error: unknown dataset '{dataset_name}'"),
        (["inspect", dataset_name], f"error: unknown dataset '{dataset_name}'"),
        (["get", dataset_name, "not-a-uuid", "-o", str(tmp_path / "x")], "error: 'not-a-uuid' is not a UUID"),
        (["dataset", "create", "Bad-Name", "--key", "k", "--encoding", "png"], "error: invalid dataset name"),
    ]
    for args, message in cases:
        proc = run(cassandra_node, *args, check=False)
        assert proc.returncode == 1, args
        assert proc.stderr.startswith(message), proc.stderr
        assert "Traceback" not in proc.stderr
    run(cassandra_node, "dataset", "create", dataset_name, "--key", "path", "--meta", "patient_id",
        "--encoding", "jpeg")
    missing = run(cassandra_node, "ingest", dataset_name, str(tmp_path / "missing.csv"), check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    (tmp_path / "m.csv").write_text("path,label\nx.jpg,0\n")
    mismatch = run(cassandra_node, "ingest", dataset_name, str(tmp_path / "m.csv"), check=False)
    assert mismatch.returncode == 1
    assert "does not match dataset" in mismatch.stderr and "missing column(s) patient_id" in mismatch.stderr


def test_unreachable_ring_is_a_clear_error():
    proc = subprocess.run([RINGFEED, "--hosts", "127.0.99.1", "datasets"], capture_output=True, text=True)
    assert proc.returncode == 1
    error, hint = proc.stderr.strip().split("\n")
    assert error.startswith("error: cannot reach Cassandra at 127.0.99.1:9042 (")
    assert error.endswith("is the ring up and are its contact points right?")
    assert hint.startswith("hint: --hosts (RINGFEED_HOSTS) names the contact points")


def test_ring_errors_name_command_line_options_only_in_their_cli_hint():
    """The operator copies messages into Kubernetes conditions, whose readers have no command-line options."""
    from cassandra.cluster import NoHostAvailable

    from ringfeed.errors import ring_error

    for cause in (ConnectionRefusedError("refused"), __import__("cassandra").AuthenticationFailed("bad login")):
        error = ring_error(NoHostAvailable("no host", {"127.0.99.1:9042": cause}), where="127.0.99.1:9042")
        assert "--" not in str(error) and "ringfeed " not in str(error) and "RINGFEED_" not in str(error)
        assert error.cli_hint.startswith("--")


DATASET_KEYS = {"name", "keyspace", "dataset_id", "encoding", "replication_factor", "natural_keys", "metadata",
                "samples", "bytes", "labels", "created_at", "stats_updated_at", "last_ingest"}
SPLIT_KEYS = {"dataset", "name", "version", "split_id", "dataset_id", "content_hash", "parts", "samples",
              "created_at"}


def demo_dataset(node, name, tmp_path, split=True):
    """The demo slide set ingested as `name` (keys patient_id, slide_num, x, y; metadata scanner), split by patient."""
    demo = make_demo_set(tmp_path, patients=3)
    run(node, "dataset", "create", name, "--key", "patient_id", "--key", "slide_num:int", "--key", "x:int",
        "--key", "y:int", "--meta", "scanner", "--encoding", "jpeg", "--label-names", "normal,tumor")
    run(node, "ingest", name, str(demo.manifest))
    if split:
        run(node, "split", "create", name, "by-patient", "--ratios", "2,1", "--group-by", "patient_id")
    first = demo.manifest.read_text().splitlines()[1].split(",")
    return demo, first


def test_listing_and_inspect_commands_print_json_with_stable_keys(cassandra_node, dataset_name, tmp_path):
    demo, first = demo_dataset(cassandra_node, dataset_name, tmp_path)
    listed = json.loads(run(cassandra_node, "datasets", "--json").stdout)
    mine = next(d for d in listed if d["name"] == dataset_name)
    assert set(mine) == DATASET_KEYS
    assert mine["samples"] == demo.images and mine["encoding"] == {"kind": "jpeg", "dtype": None, "shape": None}
    assert [k["name"] for k in mine["natural_keys"]] == ["patient_id", "slide_num", "x", "y"]
    assert [(label["label"], label["name"]) for label in mine["labels"]] == [(0, "normal"), (1, "tumor")]
    assert sum(label["samples"] for label in mine["labels"]) == demo.images
    assert json.loads(run(cassandra_node, "inspect", dataset_name, "--json").stdout) == mine

    splits = json.loads(run(cassandra_node, "split", "list", dataset_name, "--json").stdout)
    assert [set(s) for s in splits] == [SPLIT_KEYS]
    assert splits[0]["dataset_id"] == mine["dataset_id"] and sum(splits[0]["parts"].values()) == demo.images
    shown = json.loads(run(cassandra_node, "split", "show", dataset_name, "by-patient", "--json").stdout)
    assert set(shown) == SPLIT_KEYS | {"spec", "stats"}
    assert shown["spec"]["group_by"] == ["patient_id"]
    cell = shown["stats"]["parts"][0]["labels"]["1"]
    assert set(cell) == {"samples", "target", "available"}

    uid = sample_uuid(dataset_name, (first[1], int(first[2]), int(first[3]), int(first[4])))
    sample = json.loads(run(cassandra_node, "get", dataset_name, str(uid), "--json").stdout)
    assert set(sample) == {"dataset", "uuid", "label", "label_name", "bytes", "fields", "output"}
    assert sample["uuid"] == str(uid) and sample["output"] is None
    assert sample["fields"] == {"patient_id": first[1], "slide_num": int(first[2]), "x": int(first[3]),
                                "y": int(first[4]), "scanner": first[5]}


def test_a_sample_is_looked_up_by_natural_key_or_by_uuid(cassandra_node, dataset_name, tmp_path):
    _, first = demo_dataset(cassandra_node, dataset_name, tmp_path, split=False)
    key = ["--key", f"patient_id={first[1]}", "--key", f"slide_num={first[2]}", "--key", f"x={first[3]}",
           "--key", f"y={first[4]}"]
    target = tmp_path / "by-key.jpg"
    by_key = json.loads(run(cassandra_node, "get", dataset_name, *key, "-o", str(target), "--json").stdout)
    uid = sample_uuid(dataset_name, (first[1], int(first[2]), int(first[3]), int(first[4])))
    assert by_key["uuid"] == str(uid) and by_key["output"] == str(target)
    assert target.read_bytes() == (tmp_path / first[0]).read_bytes()
    assert by_key["fields"]["scanner"] == first[5] and by_key["label"] == int(first[6])

    shown = run(cassandra_node, "get", dataset_name, str(uid)).stdout
    assert str(uid) in shown and f"patient_id  {first[1]}" in shown and f"scanner     {first[5]}" in shown
    for args, message in [
        (["--key", f"patient_id={first[1]}"], f"error: dataset '{dataset_name}' is keyed by patient_id, slide_num, "
                                              "x, y: give each of them once"),
        ([*key[:-1], "y=abc"], f"error: dataset '{dataset_name}': y='abc' is not an integer"),
        ([str(uid), *key], "error: give a sample's UUID or its natural key"),
        ([*key[:-1], "y=999999"], f"error: dataset '{dataset_name}' has no sample with patient_id="),
    ]:
        proc = run(cassandra_node, "get", dataset_name, *args, check=False)
        assert proc.returncode == 1 and proc.stderr.startswith(message), proc.stderr


def test_tables_are_never_cut_when_piped(cassandra_node, dataset_name, tmp_path):
    demo_dataset(cassandra_node, dataset_name, tmp_path)
    narrow = {"COLUMNS": "40"}
    for args in (["datasets"], ["split", "list", dataset_name], ["split", "show", dataset_name, "by-patient"]):
        rows = [line for line in run(cassandra_node, *args, env=narrow).stdout.splitlines() if line.startswith("│")]
        assert rows and not any("…" in row for row in rows), args
    datasets = run(cassandra_node, "datasets", env=narrow).stdout
    assert any(dataset_name in line and "jpeg" in line for line in datasets.splitlines())
    listed = run(cassandra_node, "split", "list", dataset_name, env=narrow).stdout
    assert any(line.count(dataset_name) == 1 and "by-patient" in line and "sha256" not in line
               for line in listed.splitlines())


def test_split_show_prints_achieved_vs_target_per_part_and_class(cassandra_node, dataset_name, tmp_path):
    classes = [f"class{c}" for c in range(10)]
    run(cassandra_node, "dataset", "create", dataset_name, "--key", "item:int", "--encoding", "raw", "--dtype",
        "uint8", "--shape", "4", "--label-names", ",".join(classes))
    for i in range(200):
        (tmp_path / f"{i}.bin").write_bytes(bytes(4))
    (tmp_path / "m.csv").write_text("path,item,label\n" + "".join(f"{i}.bin,{i},{i % 10}\n" for i in range(200)))
    run(cassandra_node, "ingest", dataset_name, str(tmp_path / "m.csv"))
    run(cassandra_node, "split", "create", dataset_name, "s", "--ratios", "7,2,1")
    shown = run(cassandra_node, "split", "show", dataset_name, "s").stdout
    for label, name in enumerate(classes):
        row = next(line for line in shown.splitlines() if f"{label} {name} " in line)
        assert re.findall(r"(\d+)/(\d+) \((\d+)\)", row) == [("14", "14", "14"), ("4", "4", "4"), ("2", "2", "2")]


def test_wrong_typed_where_values_get_one_message_shape(cassandra_node, dataset_name, tmp_path):
    run(cassandra_node, "dataset", "create", dataset_name, "--key", "site:text", "--key", "item:int", "--meta",
        "score:double", "--meta", "flagged:boolean", "--encoding", "raw", "--dtype", "uint8", "--shape", "4")
    for i in range(20):
        (tmp_path / f"{i}.bin").write_bytes(bytes(4))
    (tmp_path / "m.csv").write_text("path,site,item,score,flagged,label\n"
                                    + "".join(f"{i}.bin,00{i % 3},{i},{i / 2},{i % 2 == 0},{i % 2}\n"
                                              for i in range(20)))
    run(cassandra_node, "ingest", dataset_name, str(tmp_path / "m.csv"))
    for where, message in [
        ("site == 001", "filter site == 1: site is text, 1 is not (quote it: site == '1')"),
        ("site in (001, 'b')", "filter site in (1, 'b'): site is text, 1 is not"),
        ("item == abc", "filter item == 'abc': item is an integer, 'abc' is not"),
        ("score > high", "filter score > 'high': score is a number, 'high' is not"),
        ("flagged == 1", "filter flagged == 1: flagged is a boolean, 1 is not"),
    ]:
        proc = run(cassandra_node, "split", "create", dataset_name, "s", "--where", where, check=False)
        assert proc.returncode == 1, where
        assert proc.stderr.startswith(f"error: {message}"), proc.stderr
    run(cassandra_node, "split", "create", dataset_name, "s", "--where", "site == '001'", "--ratios", "1")


def test_progress_goes_to_stderr_and_results_to_stdout(cassandra_node, dataset_name, tmp_path):
    """Piped, as a script reads them: ingest, split create and load draw their bars on stderr only."""
    demo = make_demo_set(tmp_path, patients=3)
    run(cassandra_node, "dataset", "create", dataset_name, "--key", "patient_id", "--key", "slide_num:int", "--key",
        "x:int", "--key", "y:int", "--meta", "scanner", "--encoding", "jpeg", "--label-names", "normal,tumor")
    for args, result in [
        (["ingest", dataset_name, str(demo.manifest)], f"ingested {demo.images:,} samples"),
        (["split", "create", dataset_name, "by-patient", "--ratios", "2,1", "--group-by", "patient_id"],
         "stored as version 1"),
        (["load", dataset_name, "by-patient", "--epochs", "2", "-b", "8"], "epoch 1:"),
    ]:
        proc = run(cassandra_node, *args)
        assert result in proc.stdout, args
        assert not re.search(r"\beta\b", proc.stdout), proc.stdout
        assert re.search(r"\beta\b", proc.stderr), (args, proc.stderr)  # the bar, drawn once at its end


def test_bad_values_are_usage_errors_in_one_line(cassandra_node):
    for args in (["ingest", "d", ".", "--metrics-port", "70000"], ["serve", "d", "s", "--http-port", "0"],
                 ["dataset", "create", "d", "--key", "k", "--encoding", "raw", "--dtype", "uint8", "--shape", "4,x"]):
        proc = run(cassandra_node, *args, check=False)
        assert proc.returncode == 2 and proc.stdout == "", args
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr
        assert "Traceback" not in proc.stderr


def test_local_down_without_a_ring_says_so_and_fails(tmp_path):
    proc = subprocess.run([RINGFEED, "local", "--state-dir", str(tmp_path / "none"), "down"], capture_output=True,
                          text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: no local ring is running") and "nothing to stop" in proc.stderr


def test_load_counts_the_images_the_trainer_side_decode_could_not_decode(cassandra_node, store, dataset_name,
                                                                          tmp_path):
    """With --decode-device gpu the loader hands the stored bytes on and the trainer's decode (torchvision's, here
    on the CPU) finds the damage the header did not show: the summary counts it with the loader's own."""
    pytest.importorskip("torchvision")
    ingest_demo_slides(store, dataset_name, tmp_path)
    victim = uuid.UUID(bytes=LoaderSource.from_split(dataset_name, "s", "train", store=store).uuids[3].tobytes())
    table = f"{dataset_name}.data_by_uuid"
    data = store.session.execute(f"SELECT data FROM {table} WHERE uuid = %s", (victim,)).one()[0]
    store.session.execute(f"UPDATE {table} SET data = %s WHERE uuid = %s", (data[:len(data) // 2], victim))
    for device, summary in (("gpu", "corrupt 1 (1 of them found by the trainer-side decode)"), ("cpu", "corrupt 1\n")):
        out = run(cassandra_node, "load", dataset_name, "s", "--decode", "32x32", "--decode-device", device).stdout
        assert summary in out, out
