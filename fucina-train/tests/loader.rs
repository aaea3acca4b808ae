//! The loader's batch order is a pure function of the seed and the epoch:
//! bitwise the same for prefetch depths 0, 1 and 4, for 1 and 2 workers,
//! and over a resumed epoch; shards match the distributed sampler's rule;
//! bad input is a clear error; dropping an epoch early stops the workers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Tests that start loader threads take turns, so one can count them.
static THREADS: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    THREADS.lock().unwrap_or_else(|e| e.into_inner())
}

use fucina_autograd::Tensor;
use fucina_core::ExecContext;
use fucina_train::collate::{pad_labels, pad_sequences, IGNORE_INDEX};
use fucina_train::{
    DataLoader, Dataset, Error, InMemory, JsonlDataset, LoaderOptions, TextWindows,
};

fn stream(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7919) % 61).collect()
}

/// Every epoch's batches as token ids, with tensors made by collate.
fn run(prefetch: usize, workers: usize, threads: usize, epochs: u64) -> Vec<Vec<i64>> {
    let ctx = ExecContext::with_threads(threads).unwrap();
    let data = TextWindows::random(stream(500), 8, 37, 3).unwrap();
    let c = ctx.clone();
    let loader = DataLoader::new(
        data,
        LoaderOptions::new(5)
            .seed(11)
            .prefetch(prefetch)
            .workers(workers),
        move |items: Vec<(Vec<i64>, Vec<i64>)>| {
            let x: Vec<i64> = items.iter().flat_map(|(x, _)| x.clone()).collect();
            Ok(Tensor::constant(&c, &x, &[items.len(), 8])?)
        },
    )
    .unwrap();
    let mut out = Vec::new();
    for e in 0..epochs {
        for b in loader.epoch(e).unwrap() {
            out.push(b.unwrap().to_vec::<i64>().unwrap());
        }
    }
    out
}

#[test]
fn the_order_is_the_same_for_any_prefetch_depth_worker_and_thread_count() {
    let _turn = turn();
    let want = run(0, 1, 1, 3);
    assert_eq!(want.len(), 3 * 8); // 37 windows in batches of 5, tail kept
    for threads in [1, 2] {
        for (p, w) in [(0, 1), (1, 1), (4, 1), (1, 2), (4, 2)] {
            assert_eq!(
                run(p, w, threads, 3),
                want,
                "prefetch {p}, workers {w}, threads {threads}"
            );
        }
    }
    // Epochs differ (the shuffle is per epoch).
    assert_ne!(want[..8], want[8..16]);
}

#[test]
fn a_resumed_epoch_continues_the_uninterrupted_one() {
    let _turn = turn();
    let data = InMemory::new((0..23u32).collect());
    let loader = DataLoader::new(data, LoaderOptions::new(4).seed(5).prefetch(2), Ok).unwrap();
    let full: Vec<Vec<u32>> = loader.epoch(2).unwrap().map(Result::unwrap).collect();
    for start in 0..full.len() {
        let tail: Vec<Vec<u32>> = loader
            .epoch_from(2, start)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(tail, full[start..]);
    }
    // Each epoch is a permutation of the whole set.
    let mut all: Vec<u32> = full.concat();
    all.sort();
    assert_eq!(all, (0..23).collect::<Vec<_>>());
}

#[test]
fn drop_last_shuffle_off_and_shards() {
    let _turn = turn();
    let data = InMemory::new((0..10u32).collect());
    let opts = LoaderOptions::new(3)
        .shuffle(false)
        .drop_last(true)
        .prefetch(0);
    let l = DataLoader::new(data.clone(), opts.clone(), Ok).unwrap();
    let b: Vec<Vec<u32>> = l.epoch(0).unwrap().map(Result::unwrap).collect();
    assert_eq!(b, [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8]]);
    // Shards: rank r takes positions r, r + world, … of the epoch order (the
    // distributed sampler's rule), and every rank runs the same number of
    // full batches, len / (world · batch) = 10 / 6 = 1, whatever its share.
    let mut seen = Vec::new();
    for rank in 0..3 {
        let l = DataLoader::new(
            data.clone(),
            LoaderOptions::new(2).shuffle(false).shard(rank, 3),
            Ok,
        )
        .unwrap();
        assert_eq!(l.batches_per_epoch(), 1, "rank {rank}");
        let b: Vec<Vec<u32>> = l.epoch(0).unwrap().map(Result::unwrap).collect();
        assert_eq!(b, [vec![rank as u32, rank as u32 + 3]]);
        seen.extend(b.concat());
    }
    seen.sort();
    assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
    // Shuffled shards are disjoint too.
    let mut seen = Vec::new();
    for rank in 0..2 {
        let l = DataLoader::new(
            data.clone(),
            LoaderOptions::new(2).seed(9).shard(rank, 2),
            Ok,
        )
        .unwrap();
        assert_eq!(l.batches_per_epoch(), 2);
        seen.extend(l.epoch(1).unwrap().flat_map(Result::unwrap));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 8);
    // Resuming past the end of an epoch is an error, not an empty epoch.
    let l = DataLoader::new(data, opts, Ok).unwrap();
    assert!(l.epoch_from(0, 4).is_err());
}

#[test]
fn bad_input_is_a_clear_error() {
    let _turn = turn();
    let short = InMemory::new(vec![1u32, 2]);
    let e = DataLoader::new(short, LoaderOptions::new(3).drop_last(true), Ok)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("drop_last") && e.contains("2 items"), "{e}");
    let e = TextWindows::sequential(vec![1, 2, 3], 3)
        .unwrap_err()
        .to_string();
    assert!(e.contains("window of 3"), "{e}");
    let dir = std::env::temp_dir().join(format!("fucina-train-jsonl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    let e = JsonlDataset::open(&empty).unwrap_err().to_string();
    assert!(e.contains("empty.jsonl") && e.contains("no rows"), "{e}");
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"a\", \"completion\": \"b\"}\n[1, 2]\n").unwrap();
    let e = JsonlDataset::open(&bad).unwrap_err().to_string();
    assert!(e.contains("line 2"), "{e}");
    let good = dir.join("good.jsonl");
    std::fs::write(
        &good,
        "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"c\"}\n",
    )
    .unwrap();
    let d = JsonlDataset::open(&good).unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d.strings("prompt").unwrap(), ["a", "c"]);
    // The error names the file and the line (3: the blank line counts).
    let e = d.strings("completion").unwrap_err().to_string();
    assert!(
        e.contains("good.jsonl") && e.contains("line 3: field `completion` is missing"),
        "{e}"
    );
    assert_eq!(d.line_of(1), Some(3));
    std::fs::remove_dir_all(&dir).ok();
    assert!(matches!(
        DataLoader::new(InMemory::new(vec![1u32]), LoaderOptions::new(0), Ok),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn a_collate_error_ends_the_epoch_and_dropping_early_stops_the_workers() {
    let _turn = turn();
    let built = Arc::new(AtomicUsize::new(0));
    let b2 = Arc::clone(&built);
    let loader = DataLoader::new(
        InMemory::new((0..100u32).collect()),
        LoaderOptions::new(1).shuffle(false).prefetch(2).workers(2),
        move |items: Vec<u32>| {
            b2.fetch_add(1, Ordering::SeqCst);
            if items[0] == 3 {
                Err(Error::Worker("bad item 3".into()))
            } else {
                Ok(items[0])
            }
        },
    )
    .unwrap();
    let got: Vec<Result<u32, Error>> = loader.epoch(0).unwrap().collect();
    assert_eq!(got.len(), 4);
    assert!(got[3]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("bad item 3"));
    // Taking two batches and dropping the epoch: the drop stops and joins
    // the workers, so no loader thread is left.
    built.store(0, Ordering::SeqCst);
    let mut it = loader.epoch(1).unwrap();
    it.next();
    it.next();
    assert!(
        loader_threads() > 0,
        "the workers run while the epoch lives"
    );
    drop(it);
    // The drop joined the workers; a joined thread can stay listed in
    // /proc/self/task for a moment while the kernel finishes its exit (seen
    // on a loaded machine), so allow it a little time to disappear.
    let t0 = std::time::Instant::now();
    while loader_threads() > 0 && t0.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(loader_threads(), 0, "a worker outlived its epoch");
    assert!(built.load(Ordering::SeqCst) < 100);
}

/// Threads of this process named `fucina-loader-*`.
fn loader_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.starts_with("fucina-loader"))
        })
        .count()
}

#[test]
fn padding_with_masks_and_ignored_labels() {
    let _turn = turn();
    let ctx = ExecContext::with_threads(1).unwrap();
    {
        let b = pad_sequences(&ctx, &[vec![4, 5], vec![6, 7, 8]], 0).unwrap();
        assert_eq!(b.ids.shape(), &[2, 3]);
        assert_eq!(b.ids.to_vec::<i64>().unwrap(), [4, 5, 0, 6, 7, 8]);
        assert_eq!(b.mask.to_vec::<u8>().unwrap(), [1, 1, 0, 1, 1, 1]);
        let l = pad_labels(&ctx, &[vec![4], vec![6, 7]]).unwrap();
        assert_eq!(l.to_vec::<i64>().unwrap(), [4, IGNORE_INDEX, 6, 7]);
        assert!(pad_sequences(&ctx, &[vec![], vec![]], 0).is_err());
    }
    assert_eq!(ctx.stats().outstanding, 0);
}
