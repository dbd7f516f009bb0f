"""A snapshot's columnar partition blocks read back into the same image (issue 22 rebuilt
the block reader on zip/map): replica lists of one length or of several, ISRs that differ
from the replicas, moving partitions, ELRs, and a block replacing partitions in place."""

from __future__ import annotations

import random

from controller_core.metadata.image import MetadataImage
from controller_core.metadata.records import PartitionRecord, TopicRecord


def _image(rng: random.Random, varying: bool) -> MetadataImage:
    image = MetadataImage()
    for t in ("a", "b"):
        image.apply(TopicRecord(t, f"id-{t}"))
        for i in range(rng.randint(0, 300)):
            n = rng.randint(1, 5) if varying else 3
            replicas = tuple(rng.sample(range(20), n))
            isr = replicas if rng.random() < 0.8 else replicas[:1]
            moving = rng.random() < 0.1
            adding = replicas[-1:] if moving else ()
            removing = (replicas[0],) if moving and rng.random() < 0.5 else ()
            elr = replicas[1:2] if rng.random() < 0.05 else ()
            last = replicas[:1] if rng.random() < 0.05 else ()
            image.apply(PartitionRecord(t, i, replicas, isr, replicas[0], rng.randint(0, 9),
                                        rng.randint(0, 9), adding, removing, elr, last))
    return image


def test_blocks_read_back_into_the_same_image() -> None:
    rng = random.Random(7)
    for varying in (False, True, False, True):
        image = _image(rng, varying)
        rows = list(image.snapshot_rows())
        back = MetadataImage()
        back.apply_rows(rows)
        for name, topic in image.topics.items():
            assert back.topics[name].partitions == topic.partitions
            assert all(type(p) is type(q) for p, q in
                       zip(back.topics[name].partitions, topic.partitions, strict=True))
        assert back.reassigning == image.reassigning
        # the same rows again replace the partitions in place: nothing doubles, moves stay
        back.apply_rows(rows)
        assert {n: t.partitions for n, t in back.topics.items()} == \
            {n: t.partitions for n, t in image.topics.items()}
        assert back.reassigning == image.reassigning
