//! `examples/linreg.rs` stays the smallest complete program: at most 15
//! non-blank, non-comment lines, and its only import is the prelude.

#[test]
fn linreg_is_at_most_15_lines_and_imports_only_the_prelude() {
    let src = include_str!("../linreg.rs");
    let code: Vec<&str> = src
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .collect();
    assert!(
        code.len() <= 15,
        "linreg.rs has {} lines of code (limit 15):\n{}",
        code.len(),
        code.join("\n")
    );
    let uses: Vec<&&str> = code.iter().filter(|l| l.starts_with("use ")).collect();
    assert_eq!(uses, [&"use fucina::prelude::*;"]);
}
