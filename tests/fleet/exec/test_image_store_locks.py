"""The image store never holds its lock across a call to the engine (no Docker: a scripted engine).

Before, an eviction removed images under the store's lock: a 3 s removal made every create wait (its
hold of the image it starts from takes the lock) and the node's health figures with it. Now only a create
of the very image being removed waits, for that removal."""

from __future__ import annotations

import secrets
import threading
from typing import Any

from swe_rl.fleet.exec.config import ExecConfig
from swe_rl.fleet.exec.image_disk import LocalImage
from swe_rl.fleet.exec.images import ImageStore

BOUND = 60.0  # only a hang reaches it


class SlowEngine:
    """Two idle images over a 15-byte budget; removing one blocks until the test releases it."""

    def __init__(self) -> None:
        self.images = [
            LocalImage("old", ("r/old:1",), (("lo", 10),)),
            LocalImage("new", ("r/new:1",), (("ln", 10),)),
        ]
        self.removing, self.release = threading.Event(), threading.Event()

    def image_info(self, ref: str) -> LocalImage | None:
        return next((i for i in self.images if ref in i.tags), None)

    def pull(self, ref: str, progress: Any) -> None:
        raise AssertionError("no pull here")

    def remove(self, image: LocalImage) -> None:
        self.removing.set()
        assert self.release.wait(BOUND)
        self.images = [i for i in self.images if i.id != image.id]

    def list_images(self) -> list[LocalImage]:
        return list(self.images)

    def images_in_use(self) -> set[str]:
        return set()

    def data_root(self) -> str:
        return ""


def test_an_eviction_in_progress_blocks_only_a_create_of_the_image_it_removes(tmp_path):
    engine = SlowEngine()
    cfg = ExecConfig(token=secrets.token_hex(8), state_dir=str(tmp_path), image_disk_budget="15")
    store = ImageStore(cfg, engine)
    store.last_used = {"old": 1.0, "new": 2.0}  # "old" is the LRU victim
    evicted: list[list[str]] = []
    evictor = threading.Thread(target=lambda: evicted.append(store.enforce_budget()))
    evictor.start()
    victim_held = threading.Event()
    try:
        assert engine.removing.wait(BOUND)
        # the removal is under way: the store's figures and a create of another image do not wait for it
        assert store.counts()["budget"] == 15
        with store.hold("r/new:1"):
            pass

        def create_victim() -> None:
            with store.hold("r/old:1"):
                victim_held.set()

        waiter = threading.Thread(target=create_victim)
        waiter.start()
        assert not victim_held.wait(0.5)  # a create of the image being removed waits for the removal
    finally:
        engine.release.set()
        evictor.join(BOUND)
    waiter.join(BOUND)
    assert victim_held.is_set() and evicted == [["old"]]
    assert store.evicting == {} and store.holds == {}


def test_a_held_image_is_never_chosen(tmp_path):
    engine = SlowEngine()
    engine.release.set()
    cfg = ExecConfig(token=secrets.token_hex(8), state_dir=str(tmp_path), image_disk_budget="15")
    store = ImageStore(cfg, engine)
    store.last_used = {"old": 1.0, "new": 2.0}
    with store.hold("r/old:1"):
        assert store.enforce_budget() == ["new"]
