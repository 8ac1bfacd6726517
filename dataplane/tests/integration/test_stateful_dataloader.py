"""Mid-epoch resume through torchdata's StatefulDataLoader and through Lightning's checkpoints, against a real node:
the batches before the checkpoint and those after the resume are exactly one epoch, in the order of an uninterrupted
run (torchdata's conformance test: save at step k, restore, the rest of the stream is identical)."""

from __future__ import annotations

import io

import pytest
import torch

from ringfeed import Loader
from ringfeed.errors import RingfeedError
from ringfeed.store import Store
from ringfeed.torch import RingfeedDataLoader, RingfeedDataset

from conftest import ingest_demo_slides

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader

NAME = "stateful_slides"
BATCH = 8


@pytest.fixture(scope="module")
def stateful_store(cassandra_node, tmp_path_factory):
    with Store(cassandra_node.address) as store:
        ingest_demo_slides(store, NAME, tmp_path_factory.mktemp("stateful"))
        yield store


def dataset(store, seed: int) -> RingfeedDataset:
    return RingfeedDataset(NAME, "s", "train", batch_size=BATCH, store=store, with_uuids=True, seed=seed)


def ids(batches) -> list[bytes]:
    return [bytes(u.numpy().tobytes()) if isinstance(u, torch.Tensor) else u.tobytes()
            for batch in batches for u in batch[2]]


def epoch_order(store, seed: int, epoch: int = 0) -> list[bytes]:
    """An uninterrupted epoch, read by the plain loader in one process."""
    loader = Loader(NAME, "s", "train", batch_size=BATCH, store=store, with_uuids=True, seed=seed)
    loader.set_epoch(epoch)
    order = ids(loader)
    assert len(order) == len(set(order)) > 10 * BATCH
    return order


def saved_and_loaded(state: dict) -> dict:
    """A state as a checkpoint keeps it: torch.save, then torch.load with weights_only (plain data only)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("workers, stop", [(0, 7), (2, 7), (3, 5)])
def test_stateful_dataloader_resumes_mid_epoch_with_exactly_the_rest(stateful_store, workers, stop):
    full = epoch_order(stateful_store, seed=21)
    loader = StatefulDataLoader(dataset(stateful_store, 21), batch_size=None, num_workers=workers)
    head = []
    for step, batch in enumerate(loader, 1):
        head += ids([batch])
        if step == stop:
            break
    state = saved_and_loaded(loader.state_dict())
    del loader  # the trainer is gone; a new process builds everything again

    data = dataset(stateful_store, 21)
    resumed = StatefulDataLoader(data, batch_size=None, num_workers=workers)
    resumed.load_state_dict(state)
    tail = ids(resumed)
    assert len(head) == stop * BATCH and head + tail == full

    data.set_epoch(1)  # the next epoch starts from its beginning, in its own order
    assert ids(resumed) == epoch_order(stateful_store, seed=21, epoch=1) != full


def test_stateful_dataloader_state_at_an_epoch_end_starts_the_next_epoch(stateful_store):
    loader = StatefulDataLoader(dataset(stateful_store, 22), batch_size=None)
    assert len(ids(loader)) == len(epoch_order(stateful_store, seed=22))
    state = saved_and_loaded(loader.state_dict())
    resumed = StatefulDataLoader(dataset(stateful_store, 22), batch_size=None)
    resumed.load_state_dict(state)
    assert ids(resumed) == epoch_order(stateful_store, seed=22, epoch=1)


def test_a_worker_position_resumes_only_with_as_many_workers(stateful_store):
    loader = StatefulDataLoader(dataset(stateful_store, 23), batch_size=None, num_workers=2)
    batches = iter(loader)
    next(batches), next(batches), next(batches)
    state = loader.state_dict()
    worker_position = state["_snapshot"]["_worker_snapshots"]["worker_1"]["dataset_state"]
    data = dataset(stateful_store, 23)
    with pytest.raises(RingfeedError, match="as many workers"):
        RingfeedDataLoader(data).load_state_dict(worker_position)
    data.load_state_dict(worker_position)
    with pytest.raises(RingfeedError, match="worker 1's of 2; it cannot resume in the main process"):
        next(iter(data))
    with pytest.raises(AssertionError):  # torchdata's own check
        resumed = StatefulDataLoader(dataset(stateful_store, 23), batch_size=None, num_workers=3)
        resumed.load_state_dict(state)
        next(iter(resumed))


@pytest.mark.parametrize("workers", [0, 2])
def test_ringfeed_dataloader_resumes_mid_epoch_and_keeps_its_length(stateful_store, workers):
    full = epoch_order(stateful_store, seed=24)
    loader = RingfeedDataLoader(dataset(stateful_store, 24), num_workers=workers)
    length = len(loader)
    head = []
    for step, batch in enumerate(loader, 1):
        head += ids([batch])
        if step == 5:
            break
    state = saved_and_loaded(loader.state_dict())
    assert state["offset"] == 5 * BATCH and state["epoch"] == 0
    assert ids(loader) == full[len(head):]  # the same loader, iterated again, goes on where it stopped
    resumed = RingfeedDataLoader(dataset(stateful_store, 24), num_workers=workers)
    resumed.load_state_dict(state)
    assert len(resumed) == length == -(-len(full) // BATCH)  # one epoch's batches, as torch and Lightning count
    assert head + ids(resumed) == full
    assert resumed.dataset.epoch == 1 and ids(resumed) == epoch_order(stateful_store, seed=24, epoch=1)


# -- Lightning ---------------------------------------------------------------------------------------------------


def lightning_run(loader, root, *, max_steps: int = -1, every: int | None = None, ckpt_path=None) -> list[bytes]:
    """Trains a one-parameter model for one epoch (or `max_steps`) on `loader`; returns the ids of the batches
    training_step saw. With `every`, a checkpoint every that many steps."""
    pl = pytest.importorskip("lightning.pytorch")

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))
            self.seen: list[bytes] = []

        def training_step(self, batch, batch_idx):
            self.seen += ids([batch])
            return (self.weight - 1).pow(2).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    callbacks = []
    if every:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=-1,
                                                      filename="{step}"))
    trainer = pl.Trainer(max_epochs=1, max_steps=max_steps, accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=bool(every),
                         callbacks=callbacks, default_root_dir=root, num_sanity_val_steps=0)
    model = Model()
    trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt_path)
    return model.seen


@pytest.mark.filterwarnings("ignore::UserWarning")  # Lightning's advice on worker counts and logging
@pytest.mark.parametrize("kind, workers", [("ringfeed", 0), ("ringfeed", 2), ("torchdata", 2)])
def test_lightning_checkpoint_resumes_mid_epoch_with_exactly_the_rest(stateful_store, tmp_path, kind, workers):
    def make_loader():
        data = dataset(stateful_store, 25)
        if kind == "ringfeed":
            return RingfeedDataLoader(data, num_workers=workers)
        return StatefulDataLoader(data, batch_size=None, num_workers=workers)

    full = epoch_order(stateful_store, seed=25)
    head = lightning_run(make_loader(), tmp_path, max_steps=6, every=3)  # checkpoints after steps 3 and 6
    assert head == full[:6 * BATCH]
    checkpoint = tmp_path / "step=3.ckpt"  # resume from the earlier one: steps 4-6 are trained again
    assert torch.load(checkpoint, weights_only=False)["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    tail = lightning_run(make_loader(), tmp_path, ckpt_path=checkpoint)
    assert head[:3 * BATCH] + tail == full
