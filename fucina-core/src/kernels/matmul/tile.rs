//! The GEMM's shared tile type, a leaf: the packed driver (`packed.rs`)
//! builds a [`Tile`] per micro-tile of C and the micro-kernels (`avx2.rs`)
//! fill it, so neither names the other for it (no `avx2` ↔ `packed` cycle).

/// One micro-tile of C handed to a micro-kernel, with its epilogue.
#[derive(Clone, Copy)]
pub struct Tile<T> {
    /// Top-left element of the tile.
    pub c: *mut T,
    /// Row stride of C (elements).
    pub rsc: isize,
    /// Column stride of C (elements).
    pub csc: isize,
    /// Valid rows (≤ MR).
    pub rows: usize,
    /// Valid columns (≤ NR).
    pub cols: usize,
    /// Scale of the product.
    pub alpha: T,
    /// Scale of the old C (ignored when `overwrite`).
    pub beta: T,
    /// Write `alpha·acc` without reading C (the first K step with `beta == 0`).
    pub overwrite: bool,
}
