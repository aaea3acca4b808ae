//! fucina-optim: optimizers, schedules, clipping and training checkpoints.
