//! What a scoped thread of ag-box's own gave back.

use anyhow::Result;

/// The result of the thread `handle` runs (`what` it does names a panic).
pub(crate) fn joined<T>(
    handle: std::thread::ScopedJoinHandle<'_, Result<T>>,
    what: &str,
) -> Result<T> {
    handle
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("{what} panicked")))
}
