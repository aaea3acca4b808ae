//! The kit's loader composes with fucina-distributed's sampler: each rank
//! loads `Subset(data, sampler.indices(epoch))` unshuffled and gets exactly
//! its share, in the sampler's order, whatever the prefetch depth; the
//! ranks' shares are disjoint and cover the data set.

use fucina_distributed::DistributedSampler;
use fucina_train::{DataLoader, InMemory, LoaderOptions, Subset};

fn rank_epoch(
    len: usize,
    rank: usize,
    world: usize,
    epoch: u64,
    prefetch: usize,
) -> (Vec<u32>, Vec<usize>) {
    let data = InMemory::new((0..len as u32).collect::<Vec<_>>());
    let sampler = DistributedSampler::new(len, rank, world, 7).unwrap();
    let want = sampler.indices(epoch).unwrap();
    let subset = Subset::new(data, want.clone()).unwrap();
    let loader = DataLoader::new(
        subset,
        LoaderOptions::new(4).shuffle(false).prefetch(prefetch),
        Ok,
    )
    .unwrap();
    let got: Vec<u32> = loader
        .epoch(epoch)
        .unwrap()
        .flat_map(|b| b.unwrap())
        .collect();
    (got, want)
}

#[test]
fn each_rank_loads_its_sampler_share_in_order() {
    let (len, world) = (103, 3);
    for epoch in 0..3 {
        let mut all = Vec::new();
        for rank in 0..world {
            let (got, want) = rank_epoch(len, rank, world, epoch, 0);
            assert_eq!(got, want.iter().map(|&i| i as u32).collect::<Vec<_>>());
            assert_eq!(
                rank_epoch(len, rank, world, epoch, 2).0,
                got,
                "prefetch changed the order"
            );
            all.extend(got);
        }
        all.sort_unstable();
        assert_eq!(
            all,
            (0..len as u32).collect::<Vec<_>>(),
            "epoch {epoch}: shares overlap or miss items"
        );
    }
    // Epochs reshuffle.
    assert_ne!(
        rank_epoch(len, 0, world, 0, 0).0,
        rank_epoch(len, 0, world, 1, 0).0
    );
}
