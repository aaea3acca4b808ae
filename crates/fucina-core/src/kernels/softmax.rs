//! Softmax, log-softmax and logsumexp along an axis, with their backward kernels.
