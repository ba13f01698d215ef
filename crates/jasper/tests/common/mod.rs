//! What the command-line tests share: reading a run's output, and what a refusal of bad
//! input must look like.

use std::process::Output;

/// A run's stdout and stderr, as text.
pub(crate) fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Asserts that `output` is a refusal of `args` that says `says`: exit 1 (refused by jasper)
/// or 2 (by the flag parser, before jasper sees it), no panic. Returns stdout.
pub(crate) fn assert_refused(args: &[&str], output: &Output, says: &str) -> String {
    let (stdout, stderr) = text(output);
    assert!(
        matches!(output.status.code(), Some(1 | 2)),
        "{args:?}: status {:?}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stderr.contains(says), "{args:?}: no {says:?} in\n{stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    // A refusal is its message, not a backtrace of where the error was made (which anyhow
    // adds to an error's `Debug` form under RUST_BACKTRACE=1).
    assert!(!stderr.contains("Stack backtrace"), "{args:?}: {stderr}");
    stdout
}
