//! Shared helpers for the lab's end-to-end tests: the real `fastrepl-lab` binary, which runs the real
//! `fastrepl` beside it (built by the same `cargo test`/`cargo build`), and real servers.
#![allow(dead_code)]

use std::process::Command;

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// `fastrepl-lab` with the suite's token, and `fastrepl` from this build.
pub fn lab() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fastrepl-lab"));
    c.env("FASTREPL_TOKEN", TOKEN);
    c
}
