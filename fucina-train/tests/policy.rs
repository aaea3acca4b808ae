//! Checkpoint policies on scripted metric sequences: keep-best keeps the
//! step with the best validation loss through pruning, early stopping stops
//! at the documented step, keep-last deletes the oldest step directories.

use fucina_train::{EarlyStopping, KeepBest, KeepLast, MetricMode};

const VAL: [f64; 9] = [3.0, 2.5, 2.6, 2.2, 2.3, 2.25, 2.21, 2.4, 2.19];

#[test]
fn keep_best_survives_pruning() {
    let root = std::env::temp_dir().join(format!("fucina-train-policy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let keep = KeepLast::new(2).unwrap();
    let mut best = KeepBest::new(MetricMode::Min);
    for (i, &v) in VAL[..8].iter().enumerate() {
        let step = 10 * (i as u64 + 1);
        let d = root.join(format!("step-{step:06}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("trainer_state.json"), "{}").unwrap();
        best.observe(step, v);
        keep.prune(&root, best.best().map(|(s, _)| s)).unwrap();
    }
    // A staging directory and an incomplete step (no marker: a crash
    // mid-save) are never counted or touched.
    std::fs::create_dir_all(root.join("step-000090.tmp-1")).unwrap();
    std::fs::create_dir_all(root.join("step-000100")).unwrap();
    keep.prune(&root, best.best().map(|(s, _)| s)).unwrap();
    assert_eq!(best.best(), Some((40, 2.2)));
    let mut left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "step-000040",
            "step-000070",
            "step-000080",
            "step-000090.tmp-1",
            "step-000100"
        ]
    );
    std::fs::remove_dir_all(&root).ok();
    assert!(KeepLast::new(0).is_err());
}

#[test]
fn early_stopping_stops_at_the_documented_step() {
    // patience 2, min_delta 0.05: best 3.0, 2.5, then 2.2 at index 3;
    // 2.3 and 2.25 (no gain over 2.2 − 0.05) are the two stale values:
    // stop at index 5 (Keras' and Lightning's count).
    let mut es = EarlyStopping::new(MetricMode::Min, 2, 0.05).unwrap();
    let stop = VAL.iter().position(|&v| es.observe(v));
    assert_eq!(stop, Some(5));
    // Patience 3 stops at the third stale value, 2.21 at index 6.
    let mut es = EarlyStopping::new(MetricMode::Min, 3, 0.05).unwrap();
    assert_eq!(VAL.iter().position(|&v| es.observe(v)), Some(6));
    // A larger-is-better metric, and NaN counting as no improvement.
    let mut es = EarlyStopping::new(MetricMode::Max, 2, 0.0).unwrap();
    assert!(!es.observe(0.5));
    assert!(!es.observe(f64::NAN));
    assert!(es.observe(0.4));
    assert!(EarlyStopping::new(MetricMode::Min, 1, -1.0).is_err());
    assert!(EarlyStopping::new(MetricMode::Min, 1, f64::NAN).is_err());
}
