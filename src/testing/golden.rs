//! Golden files: a test's output compared byte for byte with a file under `testdata/`, and
//! rewritten on request so that a change shows as a diff to review like code.

use std::path::Path;

/// Compares `got` with the golden file at `path` byte for byte; `UPDATE_GOLDENS=1` rewrites the
/// file instead (review the diff like code).
pub fn check_golden(path: &Path, got: &str) {
    #[allow(clippy::disallowed_methods)] // test-only switch for rewriting goldens
    let update = std::env::var("UPDATE_GOLDENS").is_ok_and(|v| v == "1");
    if update {
        #[allow(clippy::disallowed_methods)] // test-only golden rewrite
        std::fs::write(path, got).expect("write golden");
        return;
    }
    let want = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDENS=1 to create it",
            path.display()
        )
    });
    assert!(
        got == want,
        "{} differs from the golden; rerun with UPDATE_GOLDENS=1 and review:\n{got}",
        path.display()
    );
}
