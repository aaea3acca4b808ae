//! The GEMM's shared tile types: the micro-tile a micro-kernel writes, its shape constants,
//! the read-only strided operand view, and the bundle of one typed GEMM's operands.
//!
//! A leaf: it uses nothing else of the GEMM, so the micro-kernels (`avx2`, `avx512`) and the
//! driver (`packed`) all depend on it without depending on each other's internals in a cycle.

/// Rows of every micro-tile (f32 and f64, AVX2 and AVX-512).
pub const MR: usize = 6;
/// Columns of the AVX2 f32 micro-tile (two YMM vectors).
pub const NR_F32: usize = 16;
/// Columns of the AVX2 f64 micro-tile (two YMM vectors).
pub const NR_F64: usize = 8;
/// Columns of the AVX-512 f32 micro-tile (two ZMM vectors).
pub const NR512_F32: usize = 32;
/// Columns of the AVX-512 f64 micro-tile (two ZMM vectors).
pub const NR512_F64: usize = 16;

/// A K-major panel pack: `(dst, src, lane stride, k)` (see `packed::pack_panel`).
pub type PanelPack<T> = unsafe fn(*mut T, *const T, usize, usize);

/// A one-row GEMM over a K-contiguous B: `(k, KC, (x, x stride), (B, column stride), C's
/// row)` (see `gemv::gemv_kmajor_f32`).
pub type GemvRow<T> = unsafe fn(usize, usize, (*const T, usize), (*const T, usize), Tile<T>);

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
    /// On the last K step of a GEMM with a bias: the bias element of the tile's first
    /// column, added after the scaling (`c = (alpha·acc [+ beta·c]) + bias[j]`, two
    /// roundings, as a separate pass would); null otherwise.
    pub bias: *const T,
    /// Stride of the bias (elements).
    pub bias_stride: isize,
}

/// A strided read-only matrix: element `(i, j)` is `data[offset + i·rs + j·cs]`. Holds the
/// buffer as a shared slice, so it crosses threads without any pointer wrapper.
#[derive(Clone, Copy)]
pub struct MatRef<'a, T> {
    /// The whole buffer.
    pub data: &'a [T],
    /// Element (0, 0).
    pub offset: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl<T> MatRef<'_, T> {
    /// Element `(0, 0)` as a raw pointer, for the kernels that take one (reading through it
    /// is the caller's `unsafe`, inside the validated view).
    #[inline]
    pub fn ptr(&self) -> *const T {
        self.data.as_ptr().wrapping_add(self.offset)
    }
}

/// The operands of one typed GEMM, `C ← alpha·A·B + beta·C`, then `C[i, j] += bias[j]` when a
/// bias `(slice from element 0, stride)` is given: what every layer of the GEMM (dispatch,
/// batch runners, packed jobs) passes on together. C travels apart, as it is split into
/// disjoint parts on the way down. `A` and `B` are the whole buffers (`&[T]`, `&[S]`) above
/// the batch split, one item's strided views ([`MatRef`]) below it.
#[derive(Clone, Copy)]
pub struct GemmArgs<'s, T, A, B> {
    /// Scale of the product.
    pub alpha: T,
    /// The left operand.
    pub a: A,
    /// The right operand.
    pub b: B,
    /// Scale of the old C (`beta == 0` never reads it).
    pub beta: T,
    /// The bias added to every row of C after the product.
    pub bias: Option<(&'s [T], usize)>,
}

impl<'s, T, A, B> GemmArgs<'s, T, A, B> {
    /// The same scales and bias over other operands `a`, `b` (one batch item's views).
    #[inline]
    pub fn on<A2, B2>(self, a: A2, b: B2) -> GemmArgs<'s, T, A2, B2> {
        GemmArgs {
            alpha: self.alpha,
            a,
            b,
            beta: self.beta,
            bias: self.bias,
        }
    }
}

/// [`GemmArgs`] over one batch item's strided views of A (`T`) and B (`S`, widened while
/// packed when it is not `T`).
pub type ViewArgs<'s, T, S> = GemmArgs<'s, T, MatRef<'s, T>, MatRef<'s, S>>;

/// [`GemmArgs`] over the whole buffers of A (`T`) and B (`S`) a batched problem was planned on.
pub type BufArgs<'s, T, S> = GemmArgs<'s, T, &'s [T], &'s [S]>;
