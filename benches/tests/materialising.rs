//! The benchmark's materialising attention kernel (`benches/src/materialising.rs`) against
//! the scalar reference, so the comparison in `benches/benches/attention.rs` stays honest:
//! forward (output and probabilities) and backward on every fourth case of the streaming
//! kernel's tables (the same inputs: `fucina-core/tests/attention/cases.rs`, same seeds),
//! and an `InvalidArgument` for every grouped-query case (it has no grouped-query path).

#[macro_use]
#[path = "../../fucina-core/tests/common/macros.rs"]
mod macros;
#[path = "../../fucina-core/tests/attention/cases.rs"]
mod cases;

use cases::{cases, close, each_problem, gqa_cases, Case};
use fucina_benches::materialising;
use fucina_core::{Error, Float};

fn materialising_cases<T: Float>(cases: &[Case], tol: f64, seed: u64) {
    each_problem::<T>(cases, seed, |_, c2, n, case, p| {
        let (q, k, v, mask, opts) = (&p.q, &p.k, &p.v, p.mask.as_ref(), p.opts);
        let what = format!("case {n} {case:?}");
        if case.dims.hkv != case.dims.h {
            let err = materialising::attention(c2, q, k, v, mask, opts);
            assert!(matches!(err, Err(Error::InvalidArgument { .. })), "{what}");
        } else if n % 4 == 0 {
            let (mo, mp) = materialising::attention(c2, q, k, v, mask, opts).unwrap();
            close(
                &mo.to_vec::<T>().unwrap(),
                &p.want_o,
                tol,
                &format!("mat out {what}"),
            );
            close(
                &mp.to_vec::<T>().unwrap(),
                &p.want_p,
                tol,
                &format!("mat probs {what}"),
            );
            let mg =
                materialising::attention_backward(c2, q, k, v, &mp, &p.g, opts, [true; 3]).unwrap();
            for (name, got, want) in [
                ("mat gq", mg.0, &p.want_g[0]),
                ("mat gk", mg.1, &p.want_g[1]),
                ("mat gv", mg.2, &p.want_g[2]),
            ] {
                close(&got.unwrap().to_vec::<T>().unwrap(), want, tol, name);
            }
        }
    });
}

f32_f64_tests!(materialising_cases(&cases(), 2e-5, 21; &cases(), 1e-11, 21) => materialising_matches_reference_f32, materialising_matches_reference_f64);

f32_f64_tests!(materialising_cases(&gqa_cases(), 2e-5, 23; &gqa_cases(), 1e-11, 24) => materialising_refuses_grouped_query_f32, materialising_refuses_grouped_query_f64);
