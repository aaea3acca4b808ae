//! The non-MPI parts on their own: the distributed sampler (disjoint seeded
//! shards whose union is the data set; the global batch equals a single
//! process's) and the bucketing plan (every parameter once, reverse order,
//! cap and dtype respected).

use fucina_core::DType;
use fucina_distributed::{BucketPlan, DistributedSampler, DEFAULT_BUCKET_BYTES};

#[test]
fn shards_are_disjoint_and_cover_the_data_set() {
    for len in [0, 1, 7, 10, 33, 100] {
        for world in 1..=5 {
            for epoch in 0..3 {
                let mut all = Vec::new();
                for rank in 0..world {
                    let s = DistributedSampler::new(len, rank, world, 42).unwrap();
                    let shard = s.indices(epoch).unwrap();
                    assert_eq!(shard.len(), s.shard_len());
                    all.extend(shard);
                }
                all.sort_unstable();
                assert_eq!(all, (0..len).collect::<Vec<_>>(), "len {len} world {world}");
            }
        }
    }
}

/// Rank 1 of 2's shard of 50 elements for `seed` at `epoch`.
fn shard(seed: u64, epoch: u64) -> Vec<usize> {
    DistributedSampler::new(50, 1, 2, seed)
        .unwrap()
        .indices(epoch)
        .unwrap()
}

#[test]
fn shuffles_are_seeded_per_epoch() {
    assert_eq!(shard(9, 3), shard(9, 3));
    assert_ne!(shard(9, 0), shard(9, 1));
    assert_ne!(shard(9, 0), shard(10, 0));
    let plain = DistributedSampler::new(6, 1, 2, 9)
        .unwrap()
        .without_shuffle();
    assert_eq!(plain.indices(5).unwrap(), vec![1, 3, 5]);
}

#[test]
fn the_global_batch_is_the_single_process_batch() {
    let (len, world, b) = (41, 3, 4);
    let single = DistributedSampler::new(len, 0, 1, 5).unwrap();
    assert_eq!(single.batches_per_epoch(world * b).unwrap(), 3);
    for step in 0..10 {
        let mut global = Vec::new();
        for rank in 0..world {
            let s = DistributedSampler::new(len, rank, world, 5).unwrap();
            assert_eq!(s.batches_per_epoch(b).unwrap(), 3);
            global.extend(s.batch(step, b).unwrap());
        }
        let mut want = single.batch(step, world * b).unwrap();
        global.sort_unstable();
        want.sort_unstable();
        assert_eq!(global, want, "step {step}");
    }
}

#[test]
fn bad_sampler_arguments_are_errors() {
    assert!(DistributedSampler::new(10, 2, 2, 0).is_err());
    assert!(DistributedSampler::new(10, 0, 0, 0).is_err());
    let s = DistributedSampler::new(10, 0, 3, 0).unwrap();
    assert!(s.batches_per_epoch(0).is_err());
    assert!(s.batches_per_epoch(4).is_err()); // 3 x 4 > 10
    assert!(s.batch(0, usize::MAX).is_err());
}

#[test]
fn the_plan_holds_every_parameter_once_in_reverse_order() {
    let sizes = [10usize, 300, 5, 64, 64, 1000, 3];
    for cap in [4, 64, 256, 1024, 4096, DEFAULT_BUCKET_BYTES] {
        let specs: Vec<(usize, DType)> = sizes.iter().map(|&n| (n, DType::F32)).collect();
        let plan = BucketPlan::new(&specs, cap).unwrap();
        let order: Vec<usize> = plan
            .buckets
            .iter()
            .flat_map(|b| b.slots.iter().map(|s| s.param))
            .collect();
        assert_eq!(
            order,
            (0..sizes.len()).rev().collect::<Vec<_>>(),
            "cap {cap}"
        );
        for b in &plan.buckets {
            let mut off = 0;
            for s in &b.slots {
                assert_eq!(s.offset, off);
                assert_eq!(s.len, sizes[s.param]);
                off += s.len;
            }
            assert_eq!(b.len, off);
            assert!(
                b.len * 4 <= cap || b.slots.len() == 1,
                "cap {cap}: a bucket of {} bytes",
                b.len * 4
            );
        }
        // Greedy: no two neighbouring buckets could have been one.
        for w in plan.buckets.windows(2) {
            assert!((w[0].len + w[1].slots[0].len) * 4 > cap);
        }
        assert_eq!(plan.total_len(), sizes.iter().sum::<usize>());
    }
    let one = BucketPlan::new(
        &sizes.iter().map(|&n| (n, DType::F32)).collect::<Vec<_>>(),
        DEFAULT_BUCKET_BYTES,
    )
    .unwrap();
    assert_eq!(one.buckets.len(), 1);
}

#[test]
fn buckets_do_not_mix_dtypes() {
    let specs = [
        (4, DType::F32),
        (4, DType::F32),
        (4, DType::F64),
        (4, DType::F32),
    ];
    let plan = BucketPlan::new(&specs, 1 << 20).unwrap();
    let groups: Vec<(DType, Vec<usize>)> = plan
        .buckets
        .iter()
        .map(|b| (b.dtype, b.slots.iter().map(|s| s.param).collect()))
        .collect();
    assert_eq!(
        groups,
        vec![
            (DType::F32, vec![3]),
            (DType::F64, vec![2]),
            (DType::F32, vec![1, 0])
        ]
    );
    assert!(BucketPlan::new(&[(4, DType::I64)], 1024).is_err());
    assert!(BucketPlan::new(&[(4, DType::F32)], 0).is_err());
}

#[test]
fn chunks_pad_the_bucket_to_a_multiple_of_the_world() {
    let plan = BucketPlan::new(&[(10, DType::F32)], 1024).unwrap();
    let b = &plan.buckets[0];
    assert_eq!(b.chunk_len(1), 10);
    assert_eq!(b.chunk_len(3), 4);
    assert_eq!(b.chunk_len(10), 1);
    assert_eq!(b.chunk_len(16), 1);
}

#[test]
fn a_sampler_too_large_to_order_is_a_clean_error() {
    let s = DistributedSampler::new(usize::MAX / 2, 0, 2, 1).unwrap();
    assert!(s.indices(0).is_err());
    assert!(s.batch(0, 4).is_err());
}
