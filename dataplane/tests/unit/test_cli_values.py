"""The CLI without a server: bad option values are one-line usage errors, the local ring's commands say when there
is no ring, and progress goes to stderr while results go to stdout."""

from __future__ import annotations

import contextlib
import importlib
import json
import re
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

import ringfeed.cli.datasets as datasets_cli
import ringfeed.cli.load as load_cli
from ringfeed.cli import main
from ringfeed.cli.types import PORT
from ringfeed.errors import RingfeedError
from ringfeed.loader import Decode, LoaderOptions, RandomResizedCrop
from ringfeed.loader.loader import LoaderStats
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.store import DatasetInfo

CLI = Path(load_cli.__file__).parent
# What a progress bar (render.progress_bar: its "eta" column) or a rich spinner draws: none may reach stdout.
PROGRESS = re.compile(r"\beta\b|[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]")


def invoke(*args: str, env: dict[str, str] | None = None):
    # An unreachable contact point: every case here must fail (or finish) before any connection is tried.
    return CliRunner().invoke(main, ["--hosts", "127.0.99.1", *args], prog_name="ringfeed", env=env)


# One case per kind of bad value and per command that takes one: (arguments, the option named in the message).
BAD_VALUES = {
    "port: not a number": (["--port", "x", "datasets"], "--port"),
    "port: out of range (CQL)": (["--port", "0", "datasets"], "--port"),
    "port: out of range (ingest metrics)": (["ingest", "d", ".", "--metrics-port", "70000"], "--metrics-port"),
    "port: out of range (sidecar HTTP)": (["serve", "d", "s", "--http-port", "0"], "--http-port"),
    "port: negative (sidecar HTTP)": (["serve", "d", "s", "--http-port", "-1"], "--http-port"),
    "list: not an integer (shape)": (["dataset", "create", "d", "--key", "k", "--encoding", "raw", "--dtype",
                                      "float32", "--shape", "3,x,224"], "--shape"),
    "list: zero (shape)": (["dataset", "create", "d", "--key", "k", "--encoding", "raw", "--dtype", "float32",
                            "--shape", "3,0"], "--shape"),
    "list: not an integer (ratios)": (["split", "create", "d", "s", "--ratios", "7,two,1"], "--ratios"),
    "count: zero (replication factor)": (["dataset", "create", "d", "--key", "k", "--encoding", "jpeg", "--rf", "0"],
                                         "--replication-factor"),
    "count: zero (ingest workers)": (["ingest", "d", ".", "--workers", "0"], "--workers"),
    "count: zero (ingest writes in flight)": (["ingest", "d", ".", "--concurrency", "0"], "--concurrency"),
    "count: not a number (sample size cap)": (["ingest", "d", ".", "--max-sample-mb", "big"], "--max-sample-mb"),
    "count: zero (local nodes)": (["local", "up", "--nodes", "0"], "--nodes"),
    "count: negative (ring delay)": (["local", "up", "--ring-delay-ms", "-5"], "--ring-delay-ms"),
    "count: zero (node index)": (["local", "remove-node", "--node", "0"], "--node"),
    "count: zero (epochs)": (["load", "d", "s", "--epochs", "0"], "--epochs"),
    "count: zero (batch size)": (["load", "d", "s", "-b", "0"], "--batch-size"),
    "count: zero (world size)": (["serve", "d", "s", "--world-size", "0"], "--world-size"),
    "count: zero (ranks per Pod)": (["serve", "d", "s", "--ranks-per-pod", "0"], "--ranks-per-pod"),
    "a Pod's ranks beyond the world": (["serve", "d", "s", "--rank", "1", "--ranks-per-pod", "2", "--world-size", "3"],
                                       "--ranks-per-pod"),
    "count: rank beyond the world size": (["load", "d", "s", "--rank", "4", "--world-size", "2"], "rank"),
    "count: zero (demo patients)": (["demo", "--patients", "0"], "--patients"),
    "count: negative (max samples)": (["split", "create", "d", "s", "--max-samples", "-1"], "--max-samples"),
    "count: zero (split version)": (["split", "show", "d", "s", "--version", "0"], "--version"),
    "seed: negative (split)": (["split", "create", "d", "s", "--seed", "-1"], "--seed"),
    "seed: too large (loader)": (["load", "d", "s", "--seed", str(2**64)], "--seed"),
    "size: not a size (cache memory)": (["cache", "up", "/tmp/ring", "--memory", "lots"], "--memory"),
    "size: not a JVM size (local heap)": (["local", "up", "--heap", "768 MB"], "--heap"),
    "size: not a JVM size (cache heap)": (["cache", "serve", "master", "--master-host", "m", "--heap", "1 GiB"],
                                          "--heap"),
    "choice: unknown write consistency": (["ingest", "d", ".", "--consistency", "MOST"], "--consistency"),
    "choice: unknown read consistency": (["load", "d", "s", "--consistency", "MOST"], "--consistency"),
    "address: not loopback (cache tier)": (["cache", "up", "/tmp/ring", "--address", "10.0.0.1"], "--address"),
    "size: not HxW (decode)": (["load", "d", "s", "--decode", "224"], "224"),
    "range: min above max (crop scale)": (["load", "d", "s", "--decode", "8x8", "--resize", "random", "--crop-scale",
                                           "0.9,0.2"], "--crop-scale"),
    "range: not a number (crop ratio)": (["serve", "d", "s", "--decode", "8x8", "--resize", "random",
                                          "--crop-ratio", "3/4,wide"], "--crop-ratio"),
    "range: one number (crop ratio)": (["load", "d", "s", "--crop-ratio", "1"], "--crop-ratio"),
    "range: zero denominator (crop ratio)": (["load", "d", "s", "--crop-ratio", "3/0,4/3"], "--crop-ratio"),
    "range: area above the image (crop scale)": (["load", "d", "s", "--decode", "8x8", "--resize", "random",
                                                  "--crop-scale", "0.5,1.5"], "scale"),
    "probability above 1 (flip)": (["load", "d", "s", "--decode", "8x8", "--resize", "random", "--flip", "1.5"],
                                   "--flip"),
    "random crop flags without --resize random": (["load", "d", "s", "--decode", "8x8", "--flip", "0.2"],
                                                  "--flip"),
    "choice: unknown resize": (["load", "d", "s", "--decode", "8x8", "--resize", "zoom"], "--resize"),
    "both ratios and folds": (["split", "create", "d", "s", "--ratios", "8,2", "--folds", "5"], "--folds"),
    "name: no namespace (lineage)": (["lineage", "resnet"], "NAMESPACE/TRAININGJOB"),
    "name: no name (lineage)": (["lineage", "team-a/"], "NAMESPACE/TRAININGJOB"),
    "count: negative (lineage epoch)": (["lineage", "team-a/resnet", "--ids", "-1"], "--ids"),
}


@pytest.mark.parametrize("args, option", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_a_bad_value_is_one_line_and_exit_2(args, option, tmp_path):
    result = invoke(*args, env={"RINGFEED_LOCAL_DIR": str(tmp_path / "local"),
                                "RINGFEED_CACHE_DIR": str(tmp_path / "cache")})
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert option in lines[0] and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "local").exists(), "nothing may be started for a bad value"


def test_the_bad_value_check_fails_where_a_value_is_accepted():
    """The test above can fail: a good value gets past the option (here: to the unreachable ring, exit 1)."""
    result = invoke("--port", "9042", "ingest", "d", ".", "--workers", "2", "--max-sample-mb", "8")
    assert result.exit_code == 1 and result.stderr.startswith("error: ")


def test_lineage_without_a_cluster_says_where_to_find_one(tmp_path):
    result = invoke("lineage", "team-a/resnet", "--kubeconfig", str(tmp_path / "absent"),
                    env={"KUBERNETES_SERVICE_HOST": "", "HOME": str(tmp_path)})
    assert result.exit_code == 1 and "Traceback" not in result.stderr, (result.stderr, result.exception)
    assert result.stderr.startswith("error: no cluster to read TrainingJob team-a/resnet from") and \
        "--kubeconfig" in result.stderr


def _options():
    def walk(command: click.Command, path: str):
        for param in command.params:
            if isinstance(param, click.Option):
                yield path, param
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, f"{path} {name}")

    return list(walk(main, "ringfeed"))


def test_every_port_count_and_size_option_has_a_checked_type():
    """The class, not the instances: no option is a bare int (each has its range), every port is 1-65535, and no
    size or list is parsed from a plain string inside a command."""
    bare_ints, ports, strings = [], [], []
    for path, option in _options():
        where = f"{path} {option.opts[0]}"
        if type(option.type) is click.types.IntParamType:
            bare_ints.append(where)
        if option.name and option.name.endswith("port") and option.type != PORT and not (
                isinstance(option.type, click.IntRange) and (option.type.min, option.type.max) == (1, 65535)):
            ports.append(where)
        if option.name in {"shape", "ratios", "memory", "heap", "nodes", "workers", "concurrency", "epochs"} and \
                isinstance(option.type, click.types.StringParamType):
            strings.append(where)
    assert not bare_ints, f"options typed int without a range: {bare_ints}"
    assert not ports, f"ports not checked as 1-65535: {ports}"
    assert not strings, f"sizes, counts or lists parsed by hand: {strings}"
    assert len(_options()) > 50  # the walk saw every command's options


# -- the local ring ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["down"], ["status"], ["status", "--json"], ["add-node"], ["remove-node"]])
def test_local_commands_without_a_ring_say_so_and_exit_1(command, tmp_path):
    result = invoke("local", "--state-dir", str(tmp_path / "none"), *command)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(tmp_path / "none") in lines[0], lines
    assert "local up" in lines[0] or "nothing to stop" in lines[0]


def test_local_down_of_a_ring_whose_nodes_are_stopped_exits_1_and_purge_still_purges(tmp_path):
    state = tmp_path / "ring"
    (state / "nodes" / "n1").mkdir(parents=True)
    (state / "nodes" / "n1" / "pid").write_text("999999999")  # no such process
    (state / "ring.json").write_text(json.dumps({"settings": {}, "members": [1]}))
    stopped = invoke("local", "--state-dir", str(state), "down")
    assert stopped.exit_code == 1 and "nothing to stop" in stopped.stderr
    status = invoke("local", "--state-dir", str(state), "status", "--json")
    assert status.exit_code == 0 and json.loads(status.stdout)[0]["state"] == "stopped"
    purged = invoke("local", "--state-dir", str(state), "down", "--purge")
    assert purged.exit_code == 0 and "purged" in purged.stdout and not state.exists()


def test_the_local_ring_is_where_the_makefile_and_the_demo_look(monkeypatch, tmp_path):
    """One state directory: `make demo`/`make local-up` run the same CLI without setting RINGFEED_LOCAL_DIR, so
    `ringfeed local down` by hand finds their ring."""
    from ringfeed.cli.app import default_local_dir

    monkeypatch.delenv("RINGFEED_LOCAL_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_local_dir() == tmp_path / "ringfeed" / "local"
    makefile = (Path(__file__).resolve().parents[3] / "Makefile").read_text()
    exported = [line for line in makefile.splitlines() if "RINGFEED_LOCAL_DIR" in line and "export" in line]
    assert not exported, f"the Makefile points the ring elsewhere than the CLI's default: {exported}"


# -- progress on stderr, results on stdout ----------------------------------------------------------------------------

class FakeLoader:
    """Four batches of two samples per epoch, as ringfeed.Loader yields them."""

    def __init__(self, *args, options=None, **kwargs):
        self.epoch = 0
        self.stats = LoaderStats()
        self.options = options or LoaderOptions()

    def __len__(self):
        return 4

    def __iter__(self):
        for _ in range(4):
            self.stats.batches += 1
            self.stats.bytes += 2000
            yield np.zeros((2, 10), np.uint8), np.zeros(2, np.int64)
        self.epoch += 1


def test_load_prints_its_progress_on_stderr_and_its_result_on_stdout(monkeypatch):
    monkeypatch.setattr(load_cli, "open_store", lambda ctx: contextlib.nullcontext())
    monkeypatch.setattr(load_cli, "Loader", FakeLoader)
    result = invoke("load", "d", "s", "--epochs", "2")
    assert result.exit_code == 0, result.stderr
    assert "epoch 0: 8 samples" in result.stdout and "epoch 1: 8 samples" in result.stdout
    assert not PROGRESS.search(result.stdout), result.stdout
    assert PROGRESS.search(result.stderr)  # the bar, drawn once at its end on a non-terminal


@pytest.mark.parametrize("flags, random_crop", [
    (["--resize", "random"], RandomResizedCrop()),
    (["--resize", "random", "--crop-scale", "0.25,1", "--crop-ratio", "1/2,2", "--flip", "0"],
     RandomResizedCrop(scale=(0.25, 1.0), ratio=(0.5, 2.0), flip=0.0)),
    (["--resize", "crop"], None),
])
def test_load_hands_the_loader_the_random_crop_of_its_flags(monkeypatch, flags, random_crop):
    opened = []
    monkeypatch.setattr(load_cli, "open_store", lambda ctx: contextlib.nullcontext())
    monkeypatch.setattr(load_cli, "Loader", lambda *args, options, **kwargs: opened.append(options) or FakeLoader())
    result = invoke("load", "d", "s", "--decode", "64x48", *flags)
    assert result.exit_code == 0, result.stderr
    assert opened[0].decode == Decode(64, 48, crop=flags[1] == "crop", random_crop=random_crop)


class FakeStore:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def refresh_stats(self, name):
        schema = DatasetSchema(name, (Column("path", "text"),), Encoding("jpeg"), label_names=("cat",))
        return DatasetInfo(schema, None, 3, 300, {0: 3}, {0: 300}, None, None, None)


def test_ingest_prints_its_progress_on_stderr_and_its_summary_on_stdout(monkeypatch, tmp_path):
    ingest_module = importlib.import_module("ringfeed.ingest")  # the package's `ingest` is the function

    def fake_ingest(store, name, source, options, progress, summary):
        progress.start(3)
        for _ in range(3):
            summary.inputs += 1
            summary.written += 1
            summary.bytes += 100
            summary.label_counts[0] += 1
            progress.advance(1)

    monkeypatch.setattr(datasets_cli, "open_store", lambda ctx: FakeStore())
    monkeypatch.setattr(ingest_module, "ingest", fake_ingest)
    result = invoke("ingest", "pets", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert "ingested 3 samples" in result.stdout and "now holds 3 samples" in result.stdout
    assert not PROGRESS.search(result.stdout), result.stdout
    assert PROGRESS.search(result.stderr) and "ingest" in result.stderr and "3/3" in result.stderr


def test_no_command_draws_a_spinner_or_a_bar_on_stdout():
    """Every rich status spinner is err_console's, and the one progress bar (render.progress_bar) draws on stderr."""
    offenders = []
    for source in sorted(CLI.glob("*.py")):
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if ".status(" in line and "err_console.status(" not in line and "console.status(" in line:
                offenders.append(f"{source.name}:{number}")
            if "Progress(" in line and "console=console" in line:
                offenders.append(f"{source.name}:{number}")
    assert not offenders, f"progress drawn on stdout at {offenders}"
    from ringfeed.cli.render import progress_bar

    assert progress_bar().console.stderr


def test_a_command_that_fails_mid_progress_leaves_its_error_alone_on_stderr(monkeypatch, tmp_path):
    ingest_module = importlib.import_module("ringfeed.ingest")

    def failing_ingest(store, name, source, options, progress, summary):
        progress.start(10)
        progress.advance(3)
        raise RingfeedError("the ring went away; run the same ingest again")

    monkeypatch.setattr(datasets_cli, "open_store", lambda ctx: FakeStore())
    monkeypatch.setattr(ingest_module, "ingest", failing_ingest)
    result = invoke("ingest", "pets", str(tmp_path))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == "error: the ring went away; run the same ingest again\n"
