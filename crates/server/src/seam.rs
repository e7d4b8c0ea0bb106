//! A test's hold on a step of the server (`PVFS_FAULTS`, `crate::ctx::Faults`): the
//! step waits while a file the test made exists.

/// Waits, at most `limit`, while `path` exists (a test's fault holding `what`).
pub(crate) async fn hold_while(path: &std::path::Path, limit: std::time::Duration, what: &str) {
    let until = tokio::time::Instant::now() + limit;
    if path.exists() {
        tracing::warn!("{what} waits: held by a test's fault");
    }
    while path.exists() && tokio::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
