//! Dropout and random fills from the counter-based RNG.
