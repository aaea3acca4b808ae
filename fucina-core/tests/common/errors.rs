//! `assert_err!`: a structured-error check, `call => the error pattern it
//! must return`.

/// `assert_err!(call => pattern);` — asserts that `call` returns `Err(pattern)`
/// (`pattern` an [`fucina_core::Error`] pattern, as `Error::Broadcast { .. }`);
/// otherwise fails naming the call, what it returned and the pattern wanted.
#[allow(unused_macros)]
macro_rules! assert_err {
    ($call:expr => $pat:pat) => {
        match $call {
            Err($pat) => {}
            other => panic!(
                "`{}` returned {:?}, want Err({})",
                stringify!($call),
                other.map(|_| ()),
                stringify!($pat)
            ),
        }
    };
}
