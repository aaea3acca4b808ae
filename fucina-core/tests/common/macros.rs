//! `f32_f64_tests!`: the pair of `#[test]`s that run one generic check in f32 and in f64
//! (shared by core's kernel tests and, by `#[path]`, the benches' tests).

/// `f32_f64_tests!(generic => name_f32, name_f64);` — the two `#[test]`s that run
/// `generic::<f32>()` and `generic::<f64>()`, under the names the suite has always used;
/// `f32_f64_tests!(generic => name);` — one `#[test]` running both;
/// `f32_f64_tests!(generic(a, b) => name_f32, name_f64);` — each test calls
/// `generic::<T>(a)`, then `generic::<T>(b)`.
/// `f32_f64_tests!(generic(a32, b32; a64, b64) => name_f32, name_f64);` — the f32 test
/// calls `generic::<f32>(a32, b32)`, the f64 test `generic::<f64>(a64, b64)` (per-type
/// tolerances).
/// `f32_f64_tests!(generic(named a) => name_f32, name_f64);` — each test calls
/// `generic::<T>("name_T", a)`, its own name first (for its `skip:` lines).
/// (Files take it with `#[macro_use] mod common;`, or this file alone by `#[path]`.)
#[allow(unused_macros)]
macro_rules! f32_f64_tests {
    ($generic:ident($($a32:expr),*; $($a64:expr),*) => $f32:ident, $f64:ident) => {
        #[test]
        fn $f32() {
            $generic::<f32>($($a32),*);
        }

        #[test]
        fn $f64() {
            $generic::<f64>($($a64),*);
        }
    };
    ($generic:ident(named $($arg:expr),*) => $f32:ident, $f64:ident) => {
        #[test]
        fn $f32() {
            $generic::<f32>(stringify!($f32), $($arg),*);
        }

        #[test]
        fn $f64() {
            $generic::<f64>(stringify!($f64), $($arg),*);
        }
    };
    ($generic:ident($($arg:expr),+) => $f32:ident, $f64:ident) => {
        #[test]
        fn $f32() {
            $($generic::<f32>($arg);)+
        }

        #[test]
        fn $f64() {
            $($generic::<f64>($arg);)+
        }
    };
    ($generic:ident => $name:ident) => {
        #[test]
        fn $name() {
            $generic::<f32>();
            $generic::<f64>();
        }
    };
    ($generic:ident => $f32:ident, $f64:ident) => {
        #[test]
        fn $f32() {
            $generic::<f32>();
        }

        #[test]
        fn $f64() {
            $generic::<f64>();
        }
    };
}
