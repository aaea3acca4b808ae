//! What a newcomer reaches for is one `use fucina::prelude::*;` away:
//! `Tensor::to_dtype`, `TrainerState` with its `extra` JSON through
//! `fucina::serde_json`, the tokenizer, and the attention head helpers.

use fucina::prelude::*;

#[test]
fn the_newcomer_list_is_in_the_prelude() -> Result<()> {
    let ctx = ExecContext::with_threads(1)?;
    // to_dtype: the values of core's conversion, the gradient back in f32.
    let x = Tensor::variable(&ctx, &[0.25f32, -1.0, 3.0, 0.5, 2.0, -0.75], &[1, 2, 3])?;
    let y = x.to_dtype(DType::F64)?;
    assert_eq!(y.dtype(), DType::F64);
    assert_eq!(y.to_vec::<f64>()?, vec![0.25, -1.0, 3.0, 0.5, 2.0, -0.75]);
    y.square()?.sum_all()?.backward()?;
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>()?,
        vec![0.5, -2.0, 6.0, 1.0, 4.0, -1.5]
    );
    assert_eq!(x.to_dtype(DType::F32)?.to_vec::<f32>()?, x.to_vec::<f32>()?);

    // split_heads / merge_heads round trip: [1, 2, 6] -> [1, 2, 2, 3] -> back.
    let t = Tensor::constant(
        &ctx,
        &[
            0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0,
        ],
        &[1, 2, 6],
    )?;
    let heads = split_heads(&t, 2)?;
    assert_eq!(heads.shape(), &[1, 2, 2, 3]);
    assert_eq!(merge_heads(&heads)?.to_vec::<f32>()?, t.to_vec::<f32>()?);

    // TrainerState's `extra` is fucina's serde_json.
    let state = TrainerState {
        step: 3,
        extra: fucina::serde_json::json!({"run": {"lr": 0.001}}),
        ..TrainerState::default()
    };
    assert_eq!(state.extra["run"]["lr"], 0.001);

    // The tokenizer type and the crate behind it.
    let _: Option<Tokenizer> = None;
    let _: Option<fucina::tokenizers::Tokenizer> = None;
    drop((x, y, t, heads));
    Ok(())
}
