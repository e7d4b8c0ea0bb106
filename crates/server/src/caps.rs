//! Capabilities ([`pvfs_proto::cap`]): granted by metadata servers from an object's
//! mode, checked by any server without asking anyone, sealed with the servers' own key
//! (`[security] server_key`), which clients never hold.

use std::time::Duration;

use hmac::Mac;
use pvfs_auth::KeyRing;
use pvfs_proto::cap::{rights, Capability, CAP_MAC_LEN};
use pvfs_proto::{Attr, Errno, Handle, ObjDetail};

use crate::error::{OpError, OpResult};
use crate::session::Caller;

/// Most seconds a capability is still accepted after it expired, for clocks that
/// differ between servers (a quarter of the lifetime when that is shorter).
pub const CLOCK_SLACK: u64 = 30;

/// Makes and checks capabilities.
#[derive(Clone)]
pub struct Caps {
    keys: std::sync::Arc<KeyRing>,
    fsid: u64,
    lifetime: Duration,
}

fn now_secs() -> u64 {
    pvfs_proto::clock::now_secs()
}

impl Caps {
    /// Capabilities of file system `fsid` sealed with `keys` (the first seals, any
    /// checks), valid for `lifetime`.
    pub fn new(keys: std::sync::Arc<KeyRing>, fsid: u64, lifetime: Duration) -> Caps {
        Caps {
            keys,
            fsid,
            lifetime,
        }
    }

    fn seal(&self, key: &pvfs_auth::Key, cap: &Capability, copies: &[u32]) -> Vec<u8> {
        let mut m = key.mac();
        m.update(&cap.sealed_bytes(self.fsid, copies));
        m.finalize().into_bytes()[..CAP_MAC_LEN].to_vec()
    }

    /// One capability: `rights` on `handle` for `uid`.
    pub fn mint(&self, handle: Handle, rights: u32, uid: u32) -> Capability {
        self.mint_for_copies(handle, rights, uid, &[])
    }

    /// One capability for a datafile whose copies are on `copies` (chain order;
    /// empty: one copy), good only with that list (`Capability::sealed_bytes`).
    pub fn mint_for_copies(
        &self,
        handle: Handle,
        rights: u32,
        uid: u32,
        copies: &[u32],
    ) -> Capability {
        let mut cap = Capability {
            handle,
            rights,
            uid,
            expires: now_secs() + self.lifetime.as_secs(),
            mac: Vec::new(),
        };
        cap.mac = self.seal(self.keys.current(), &cap, copies);
        cap
    }

    /// What an answer carries for `granted` rights on object `attr`: a capability on
    /// the object with all of them, then, for a regular file granted READ or WRITE,
    /// one per datafile in layout order with those two (sealed with the datafile's
    /// copies when it has more than one).
    pub fn grant(&self, attr: &Attr, granted: u32, uid: u32) -> Vec<Capability> {
        if granted == 0 {
            return Vec::new();
        }
        let mut out = vec![self.mint(attr.handle, granted, uid)];
        let data = granted & (rights::READ | rights::WRITE);
        if let (ObjDetail::File { layout }, true) = (&attr.detail, data != 0) {
            let mut copies = Vec::new();
            out.extend(layout.datafiles.iter().map(|d| {
                copies.clear();
                if layout.replicas > 1 {
                    copies.extend(d.replicas());
                }
                self.mint_for_copies(d.handle, data, uid, &copies)
            }));
        }
        out
    }

    /// Whether `cap` is one of ours (sealed by any of the servers' keys, for the
    /// datafile copies `copies`), untouched.
    fn authentic(&self, cap: &Capability, copies: &[u32]) -> bool {
        cap.mac.len() == CAP_MAC_LEN
            && self.keys.keys().iter().any(|k| {
                let want = self.seal(k, cap, copies);
                want.iter()
                    .zip(&cap.mac)
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
            })
    }

    /// Checks that `cap` lets `caller` do `want` on `handle`: sealed by a server,
    /// for that handle and those rights, granted to the caller's user (a key-holding
    /// node acts for many users, so its capabilities may name any), and not expired
    /// (unless `renewing`: an expired capability still proves the caller was granted
    /// the object once). EACCES when it does not (EKEYEXPIRED when only expired:
    /// clients renew and retry).
    pub fn check(
        &self,
        cap: Option<&Capability>,
        handle: Handle,
        want: u32,
        caller: &Caller,
        renewing: bool,
    ) -> OpResult<()> {
        self.check_copies(cap, handle, &[], want, caller, renewing)
    }

    /// [`Caps::check`] for a datafile the request says has its copies on `copies`
    /// (chain order; empty: one copy): the capability must have been granted for
    /// exactly those, so a client cannot write one copy and leave out the others.
    pub fn check_copies(
        &self,
        cap: Option<&Capability>,
        handle: Handle,
        copies: &[u32],
        want: u32,
        caller: &Caller,
        renewing: bool,
    ) -> OpResult<()> {
        let what = || format!("{} on {handle:#x}", rights::describe(want));
        let Some(cap) = cap else {
            return Err(OpError::denied(
                Errno::EACCES,
                format!("no capability for {}", what()),
            ));
        };
        if !self.authentic(cap, copies) {
            let why = if copies.is_empty() {
                "a forged or altered capability"
            } else {
                "a forged or altered capability, or copies it was not granted for,"
            };
            return Err(OpError::denied(
                Errno::EACCES,
                format!("{why} for {}", what()),
            ));
        }
        if cap.handle != handle || !cap.allows(want) {
            return Err(OpError::denied(
                Errno::EACCES,
                format!(
                    "the capability grants {} on {:#x}, not {}",
                    rights::describe(cap.rights),
                    cap.handle,
                    what()
                ),
            ));
        }
        if !caller.trusted && cap.uid != caller.creds.uid {
            return Err(OpError::denied(
                Errno::EACCES,
                format!(
                    "the capability for {} was granted to uid {}, not {}",
                    what(),
                    cap.uid,
                    caller.creds.uid
                ),
            ));
        }
        let slack = CLOCK_SLACK.min(self.lifetime.as_secs() / 4);
        if !renewing && cap.expires.saturating_add(slack) < now_secs() {
            return Err(OpError::denied(
                Errno::EKEYEXPIRED,
                format!("the capability for {} has expired", what()),
            ));
        }
        Ok(())
    }

    /// Checks a ticket for a step of an operation that spans servers: a key-holding
    /// caller needs none; anyone else needs `want` on `handle`.
    pub fn check_ticket(
        &self,
        ticket: Option<&Capability>,
        handle: Handle,
        want: u32,
        caller: &Caller,
    ) -> OpResult<()> {
        if caller.trusted {
            return Ok(());
        }
        self.check(ticket, handle, want, caller, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_proto::Creds;

    fn caller(uid: u32, trusted: bool) -> Caller {
        Caller {
            creds: Creds {
                uid,
                gid: uid,
                groups: vec![],
            },
            trusted,
            origin: 0,
        }
    }

    /// The attributes of file 1 of uid 1000 with `layout`.
    fn file_attr(layout: pvfs_proto::Layout) -> Attr {
        Attr {
            handle: 1,
            mode: 0o644,
            uid: 1000,
            gid: 1000,
            nlink: 1,
            size: 0,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
            detail: ObjDetail::File { layout },
            blocks: 0,
            acl: None,
        }
    }

    #[test]
    fn minted_caps_check_and_anything_else_does_not() {
        let ring = std::sync::Arc::new(KeyRing::generate().unwrap());
        let caps = Caps::new(ring.clone(), 7, Duration::from_secs(60));
        let c = caps.mint(42, rights::READ, 1000);
        let alice = caller(1000, false);
        caps.check(Some(&c), 42, rights::READ, &alice, false)
            .unwrap();
        let e = |r: OpResult<()>| r.unwrap_err().errno;
        assert_eq!(
            e(caps.check(None, 42, rights::READ, &alice, false)),
            Errno::EACCES
        );
        assert_eq!(
            e(caps.check(Some(&c), 43, rights::READ, &alice, false)),
            Errno::EACCES
        );
        assert_eq!(
            e(caps.check(Some(&c), 42, rights::WRITE, &alice, false)),
            Errno::EACCES
        );
        assert_eq!(
            e(caps.check(Some(&c), 42, rights::READ, &caller(1001, false), false)),
            Errno::EACCES
        );
        // A key-holding node may use any user's capability (it acts for many).
        caps.check(Some(&c), 42, rights::READ, &caller(5, true), false)
            .unwrap();
        // Tampering with any field breaks the seal.
        for bad in [
            Capability {
                rights: rights::ALL,
                ..c.clone()
            },
            Capability {
                uid: 1001,
                ..c.clone()
            },
            Capability {
                expires: c.expires + 1000,
                ..c.clone()
            },
        ] {
            let r = caps.check(
                Some(&bad),
                bad.handle,
                rights::READ,
                &caller(bad.uid, false),
                false,
            );
            assert!(r.unwrap_err().message.contains("forged"));
        }
        // Another file system's servers do not accept it.
        let other = Caps::new(ring, 8, Duration::from_secs(60));
        assert_eq!(
            e(other.check(Some(&c), 42, rights::READ, &alice, false)),
            Errno::EACCES
        );
        // Expired: EKEYEXPIRED, unless it only proves a past grant for a renewal.
        let mut old = c.clone();
        old.expires = 1;
        let resealed = Caps::new(
            std::sync::Arc::new(KeyRing::generate().unwrap()),
            7,
            Duration::from_secs(60),
        );
        old.mac = resealed.seal(caps.keys.current(), &old, &[]);
        assert_eq!(
            e(caps.check(Some(&old), 42, rights::READ, &alice, false)),
            Errno::EKEYEXPIRED
        );
        caps.check(Some(&old), 42, rights::READ, &alice, true)
            .unwrap();
        // Files get one capability per datafile for data rights.
        let grant = caps.grant(
            &file_attr(pvfs_proto::Layout {
                stripe_size: 65536,
                replicas: 1,
                datafiles: vec![
                    pvfs_proto::Datafile::single(0, 10),
                    pvfs_proto::Datafile::single(1, 11),
                ],
                width: 2,
            }),
            rights::READ | rights::MOVE,
            1000,
        );
        assert_eq!(grant.len(), 3);
        assert!(grant.iter().all(|c| caps
            .check_copies(Some(c), c.handle, &[], 0, &alice, false)
            .is_ok()));
        assert_eq!(grant[0].rights, rights::READ | rights::MOVE);
        assert_eq!((grant[2].handle, grant[2].rights), (11, rights::READ));
    }

    #[test]
    fn a_datafile_capability_holds_only_with_the_copies_it_was_granted_for() {
        let ring = std::sync::Arc::new(KeyRing::generate().unwrap());
        let caps = Caps::new(ring, 7, Duration::from_secs(60));
        let alice = caller(1000, false);
        let mut layout = pvfs_proto::Layout {
            stripe_size: 65536,
            replicas: 2,
            datafiles: vec![pvfs_proto::Datafile::single(0, 10)],
            width: 1,
        };
        layout.datafiles[0].copies[0] = 2;
        let grant = caps.grant(&file_attr(layout), rights::READ | rights::WRITE, 1000);
        let data = &grant[1];
        let check = |copies: &[u32]| {
            caps.check_copies(Some(data), 10, copies, rights::WRITE, &alice, false)
        };
        check(&[0, 2]).unwrap();
        // Leaving a copy out, adding one, or reordering the chain breaks the seal.
        for bad in [&[][..], &[0], &[2], &[2, 0], &[0, 2, 1], &[0, 1]] {
            let e = check(bad).unwrap_err();
            assert_eq!(e.errno, Errno::EACCES, "{bad:?}");
            assert!(e.message.contains("forged or altered"), "{}", e.message);
        }
        // A one-copy capability does not stand for a list of copies either.
        let single = caps.mint(10, rights::WRITE, 1000);
        caps.check_copies(Some(&single), 10, &[], rights::WRITE, &alice, false)
            .unwrap();
        assert!(caps
            .check_copies(Some(&single), 10, &[0, 2], rights::WRITE, &alice, false)
            .is_err());
    }
}
