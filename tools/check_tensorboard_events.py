#!/usr/bin/env python3
"""Reads fucina-train's committed TensorBoard event file with TensorBoard's
own reader and writes every scalar it saw (tag -> [[step, value], ...]) and
every histogram (tag -> [{step, min, max, num, sum, sum_squares,
bucket_limit, bucket}, ...]) to fucina-train/tests/goldens/tensorboard.json,
which fucina-train's tests/metrics.rs compares against.

    cargo test --release -p fucina-train --test metrics -- --ignored write_fixture
    pip install tensorboard
    python3 tools/check_tensorboard_events.py
"""
import json
import os
import shutil
import tempfile

from tensorboard.backend.event_processing import event_accumulator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fucina-train/tests/fixtures/run.tfevents")
GOLDEN = os.path.join(ROOT, "fucina-train/tests/goldens/tensorboard.json")

with tempfile.TemporaryDirectory() as d:
    # The reader discovers files by TensorBoard's naming.
    shutil.copy(FIXTURE, os.path.join(d, "events.out.tfevents.0.fixture"))
    acc = event_accumulator.EventAccumulator(
        d, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in sorted(acc.Tags()["scalars"])}

    def hist(e):
        h = e.histogram_value
        return {"step": e.step, "min": h.min, "max": h.max, "num": h.num, "sum": h.sum,
                "sum_squares": h.sum_squares, "bucket_limit": list(h.bucket_limit),
                "bucket": list(h.bucket)}
    histograms = {tag: [hist(e) for e in acc.Histograms(tag)]
                  for tag in sorted(acc.Tags()["histograms"])}
with open(GOLDEN, "w") as f:
    json.dump({"reader": "tensorboard.backend.event_processing.event_accumulator",
               "scalars": scalars, "histograms": histograms}, f, indent=1)
    f.write("\n")
print(f"wrote {sum(len(v) for v in scalars.values())} scalars over {len(scalars)} tags and "
      f"{sum(len(v) for v in histograms.values())} histograms over {len(histograms)} tags to {GOLDEN}")
