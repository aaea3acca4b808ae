//! GEMM (C = alpha·op(A)·op(B) + beta·C) over strided and batched views, matmul and linear.
