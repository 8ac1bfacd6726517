"""``ringfeed-launch``: a Pod's trainer once per local rank, as ``torchrun --nproc_per_node`` starts it, for a
TrainingJob with ``spec.ranksPerPod`` above 1 (the operator puts it in front of the trainer's command).

Each process gets torch.distributed's environment by torchrun's conventions: ``LOCAL_RANK``, ``RANK`` = GROUP_RANK ×
LOCAL_WORLD_SIZE + LOCAL_RANK, with WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT as the
operator set them; its Feed finds its own feed from LOCAL_RANK. Unlike torchrun there is no rendezvous of agents:
when a local rank fails the others are stopped and the launcher exits with its status, so that the container
restarts in place and every local rank resumes from its checkpoint, as a single-rank trainer does.

    ringfeed-launch [--local-ranks N] -- python train.py --lr 0.1
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

STOP_GRACE_S = 10.0  # a local rank asked to stop may save a checkpoint first
POLL_S = 0.2


def rank_environment(environment: dict[str, str], local_rank: int, local_ranks: int) -> dict[str, str]:
    """The environment of local rank `local_rank`: the Pod's, plus its LOCAL_RANK and RANK."""
    group_rank = int(environment.get("GROUP_RANK", "0"))
    return {**environment, "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_ranks),
            "RANK": str(group_rank * local_ranks + local_rank)}


def run(command: list[str], local_ranks: int) -> int:
    """Start `command` once per local rank; → 0 once every one succeeded, else the first failure's status (the
    others stopped: SIGTERM, then SIGKILL after STOP_GRACE_S)."""
    processes = [subprocess.Popen(command, env=rank_environment(dict(os.environ), local_rank, local_ranks))
                 for local_rank in range(local_ranks)]

    def forward(signum, _frame):  # the kubelet stopping the container stops every local rank
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        statuses = [process.poll() for process in processes]
        failed = next((status for status in statuses if status not in (None, 0)), None)
        if failed is not None:
            stop(processes)
            return failed if failed > 0 else 128 - failed  # killed by a signal: as a shell reports it
        if all(status == 0 for status in statuses):
            return 0
        time.sleep(POLL_S)


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ringfeed-launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--local-ranks", type=int, default=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                        help="processes to start (default: LOCAL_WORLD_SIZE, which the operator sets)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the trainer's command, after --")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give the trainer's command after --")
    if options.local_ranks < 1:
        parser.error(f"--local-ranks must be at least 1, not {options.local_ranks}")
    sys.exit(run(command, options.local_ranks))


if __name__ == "__main__":
    main()
