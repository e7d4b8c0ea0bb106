//! Random ids a server picks (change-feed epochs, lease ids, the client id of its
//! own calls): from the kernel, else from the clock and the process id, which is
//! enough for ids that must differ between runs, not be secret.

/// A random 64-bit id.
pub fn random_u64() -> u64 {
    if let Ok(b) = pvfs_auth::random::array::<8>() {
        return u64::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ u64::from(std::process::id()) << 40).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}
