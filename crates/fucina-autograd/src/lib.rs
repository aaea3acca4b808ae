//! fucina-autograd: the differentiable tensor, tape, backward engine, exec scopes, gradcheck.
