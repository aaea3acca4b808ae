//! `io::write_atomic`, the workspace's one atomic writer: concurrent saves of
//! one path from many threads all succeed (each has its own temporary name),
//! a concurrent reader only ever sees one complete version (never an empty
//! or partial file), and no temporary file is left behind.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fucina_autograd::io::write_atomic;

const THREADS: usize = 8;
const SAVES: usize = 100;
const LEN: usize = 4096;

fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fucina-atomic-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Version `(thread, save)`: `LEN` bytes, a 2-byte tag repeated, so a torn
/// or mixed file is detectable.
fn version(thread: usize, save: usize) -> Vec<u8> {
    let tag = [thread as u8, save as u8];
    tag.iter().copied().cycle().take(LEN).collect()
}

/// Whether `bytes` is one whole version.
fn is_whole(bytes: &[u8]) -> bool {
    bytes.len() == LEN
        && (thread_of(bytes) as usize) < THREADS
        && bytes.chunks(2).all(|c| c == &bytes[..2])
}

fn thread_of(bytes: &[u8]) -> u8 {
    bytes[0]
}

fn tmp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

#[test]
fn eight_threads_saving_one_path_never_fail_and_a_reader_sees_whole_files() {
    let dir = scratch_dir("threads");
    let path = dir.join("model.safetensors");
    write_atomic(&path, &version(0, 0)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (path, done) = (path.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut reads, mut bad) = (0usize, Vec::new());
            while !done.load(Ordering::Acquire) {
                match std::fs::read(&path) {
                    Ok(b) if is_whole(&b) => reads += 1,
                    Ok(b) => bad.push(format!("a file of {} bytes, not one version", b.len())),
                    Err(e) => bad.push(format!("read failed: {e}")),
                }
            }
            (reads, bad)
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                (0..SAVES)
                    .filter_map(|s| write_atomic(&path, &version(t, s)).err())
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let failures: Vec<String> = writers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    done.store(true, Ordering::Release);
    let (reads, bad) = reader.join().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} saves failed, first: {}",
        failures.len(),
        THREADS * SAVES,
        failures[0]
    );
    assert!(
        bad.is_empty(),
        "{} bad reads of {}: {:?}",
        bad.len(),
        reads + bad.len(),
        &bad[..bad.len().min(3)]
    );
    let last = std::fs::read(&path).unwrap();
    assert!(is_whole(&last) && last[1] == (SAVES - 1) as u8);
    assert_eq!(
        tmp_files(&dir),
        Vec::<String>::new(),
        "temporary files left"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_write_leaves_the_old_file_and_no_temporary() {
    let dir = scratch_dir("fail");
    let path = dir.join("state.safetensors");
    write_atomic(&path, &version(1, 1)).unwrap();
    // A directory in the way of the rename: the write fails, the old file
    // elsewhere is untouched, and the temporary is cleaned up.
    let blocked = dir.join("blocked");
    std::fs::create_dir_all(blocked.join("inner")).unwrap();
    assert!(write_atomic(&blocked, &version(2, 2)).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), version(1, 1));
    assert_eq!(
        tmp_files(&dir),
        Vec::<String>::new(),
        "temporary files left"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
