//! The bucketing plan: which parameters' gradients travel together in one
//! flattened buffer.
//!
//! As PyTorch's DDP: parameters are taken in **reverse** registration order
//! (the order their gradients become ready in backward), consecutive
//! parameters of the same dtype share a bucket until adding the next would
//! pass the byte cap, and a parameter larger than the cap gets a bucket of
//! its own. Every parameter is in exactly one bucket; the plan is a pure
//! function of the parameters' sizes, dtypes and the cap, so every rank
//! computes the same plan.

use fucina_core::DType;

use crate::error::{Error, Result};

/// The default bucket cap: 25 MiB, PyTorch DDP's `bucket_cap_mb = 25`.
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

/// One parameter's place in a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The parameter's index in the list the plan was built from.
    pub param: usize,
    /// Its first element in the bucket's flat buffer.
    pub offset: usize,
    /// Its element count.
    pub len: usize,
}

/// A flat buffer of gradients of one dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// The dtype of every gradient in the bucket.
    pub dtype: DType,
    /// The parameters, in bucket order (reverse registration order).
    pub slots: Vec<Slot>,
    /// Elements in the bucket (the sum of the slots' lengths).
    pub len: usize,
}

impl Bucket {
    /// The elements each of `world` ranks reduces: `ceil(len / world)`; the
    /// buffer on the wire is padded with zeros to `world` times this.
    pub fn chunk_len(&self, world: usize) -> usize {
        self.len.div_ceil(world.max(1))
    }
}

/// The buckets of a parameter list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPlan {
    /// The buckets, in the order they are reduced.
    pub buckets: Vec<Bucket>,
    /// The byte cap the plan was built with.
    pub cap_bytes: usize,
}

impl BucketPlan {
    /// Plans buckets for parameters given as `(element count, dtype)`, in
    /// registration order. Errors on a zero cap or a dtype other than f32/f64
    /// (gradients are float).
    ///
    /// ```
    /// use fucina_core::DType;
    /// use fucina_distributed::BucketPlan;
    /// // three f32 parameters of 100, 100 and 300 elements (400, 400, 1200 bytes), a 1 KiB cap
    /// let plan = BucketPlan::new(&[(100, DType::F32), (100, DType::F32), (300, DType::F32)], 1024)?;
    /// let params: Vec<Vec<usize>> = plan.buckets.iter().map(|b| b.slots.iter().map(|s| s.param).collect()).collect();
    /// // reverse order; the 1200-byte parameter is over the cap and alone; the other two share one
    /// assert_eq!(params, vec![vec![2], vec![1, 0]]);
    /// # Ok::<(), fucina_distributed::Error>(())
    /// ```
    pub fn new(params: &[(usize, DType)], cap_bytes: usize) -> Result<Self> {
        if cap_bytes == 0 {
            return Err(Error::InvalidConfig("bucket cap must be positive".into()));
        }
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut bytes_in_last = 0usize;
        for (param, &(len, dtype)) in params.iter().enumerate().rev() {
            if !matches!(dtype, DType::F32 | DType::F64) {
                return Err(Error::InvalidConfig(format!(
                    "parameter {param} is {dtype}: only f32 and f64 gradients can be averaged"
                )));
            }
            let bytes = len.checked_mul(dtype.size_of()).ok_or_else(|| {
                Error::InvalidConfig(format!("parameter {param}: {len} elements overflow"))
            })?;
            match buckets.last_mut() {
                Some(b) if b.dtype == dtype && bytes_in_last.saturating_add(bytes) <= cap_bytes => {
                    b.slots.push(Slot {
                        param,
                        offset: b.len,
                        len,
                    });
                    b.len += len;
                }
                _ => {
                    buckets.push(Bucket {
                        dtype,
                        slots: vec![Slot {
                            param,
                            offset: 0,
                            len,
                        }],
                        len,
                    });
                    bytes_in_last = 0;
                }
            }
            bytes_in_last += bytes;
        }
        Ok(BucketPlan { buckets, cap_bytes })
    }

    /// Total elements over all buckets.
    pub fn total_len(&self) -> usize {
        self.buckets.iter().map(|b| b.len).sum()
    }
}
