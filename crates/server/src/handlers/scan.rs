//! What the fsck scans share (`ScanObjects`, `ScanEntries`, `ScanDatafiles`,
//! `ScanLost`, `ScanSeals`): how big a page may be. `pvfs fsck` reads a whole
//! server's state with them, page by page, to tell lost datafiles from holes.

use pvfs_proto::{Handle, Response};

/// Most items one scan page holds.
pub const MAX_PAGE: u32 = 8192;
/// Most objects one page holds (an object with a long symlink target is ~4 KiB, and a
/// page must stay well under the 4 MiB answer limit).
pub const MAX_OBJECT_PAGE: u32 = 512;

/// The items a page asking for `max` holds at most.
pub(crate) fn page(max: u32) -> usize {
    max.clamp(1, MAX_PAGE) as usize
}

/// The handles of sorted `all` after `after`, at most `max` of them.
pub(crate) fn handle_page(all: &[Handle], after: Option<Handle>, max: u32) -> Response {
    let start = match after {
        Some(a) => all.partition_point(|&h| h <= a),
        None => 0,
    };
    let handles: Vec<Handle> = all[start..].iter().take(page(max)).copied().collect();
    let more = start + handles.len() < all.len();
    Response::HandleList { handles, more }
}
