//! Elementwise unary and binary ops with broadcasting, scalar variants, comparisons, where and masked fill, and the pointwise derivative tier.
