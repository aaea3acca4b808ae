//! Layer norm and RMS norm over the last axis, with their backward kernels.
