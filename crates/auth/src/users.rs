//! Users and groups as this node's name service knows them: the supplementary groups
//! of a user a MUNGE credential names (MUNGE carries only uid and gid, so the server
//! resolves the rest, as an NFS server with `manage-gids` does).

use std::ffi::CStr;

/// The uid and gid that squashed root becomes (`nobody`/`nogroup` on Debian).
pub const NOBODY: u32 = 65534;

/// The name of user `uid`, if the name service knows it.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero passwd is a valid out-parameter.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the sizes given.
        let rc =
            unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || out.is_null() || pw.pw_name.is_null() {
            return None;
        }
        // SAFETY: pw_name points into buf, NUL-terminated.
        return Some(
            unsafe { CStr::from_ptr(pw.pw_name) }
                .to_string_lossy()
                .into_owned(),
        );
    }
}

/// The groups of user `uid` whose primary group is `gid`: `gid` first, then the
/// supplementary groups the name service lists (only `gid` for an unknown user).
pub fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let mut groups = vec![gid];
    let Some(name) = user_name(uid) else {
        return groups;
    };
    let Ok(cname) = std::ffi::CString::new(name) else {
        return groups;
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut list = vec![0 as libc::gid_t; n as usize];
        let mut count = n;
        // SAFETY: list holds `count` entries; cname is NUL-terminated.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, list.as_mut_ptr(), &mut count) };
        if rc < 0 {
            if count > n && count < 65536 {
                n = count;
                continue;
            }
            return groups;
        }
        list.truncate(count.max(0) as usize);
        for g in list {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        return groups;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known_and_in_its_group() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
        let g = groups_of(0, 0);
        assert_eq!(g[0], 0);
        assert_eq!(groups_of(4_000_000_000, 7), vec![7]);
    }
}
