//! Who a connection and each of its requests act for.
//!
//! The handshake binds a connection to an [`Identity`]: a node holding the file
//! system's key (its requests name their users, as an NFS client's do), or one user
//! proven by MUNGE (every request must be that user). [`Session`] keeps it for the
//! connection; [`Caller`] is what one request acts as, handed to its handler.

use pvfs_auth::Identity;
use pvfs_proto::{Creds, Errno};

use crate::error::{OpError, OpResult};

/// One authenticated connection.
#[derive(Debug)]
pub struct Session {
    /// Who the connection acts for.
    pub identity: Identity,
    /// The peer's address, for logs.
    pub peer: String,
    /// What the client called itself, for logs.
    pub client: String,
    /// The server the client asked for in the handshake: this one, or a metadata
    /// group it took over (`crate::promote`).
    pub server: String,
    /// The client instance's id, from its name (0 if it gave none): the changes it
    /// causes are not fed back to it (`crate::feed`).
    pub origin: u64,
    /// Set once the connection reads no more requests (`crate::feed`: a poll still
    /// running on it speaks for no follower).
    pub closed: std::sync::atomic::AtomicBool,
}

/// Who one request acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The user, its group and supplementary groups, after root squash.
    pub creds: Creds,
    /// Sent by a key-holding node (a server, a mount, root's tools).
    pub trusted: bool,
    /// The client instance the request is for: the changes it makes are not fed
    /// back to that client (`crate::feed`), and a server's step of it for another
    /// server carries it on.
    pub origin: u64,
}

impl Session {
    /// The caller a request claiming `creds`, for client `origin`, acts as: as
    /// claimed on a trusted connection; on a MUNGE connection only the proven user
    /// (squashed root becomes nobody), with no group it is not in, for the
    /// connection's own client; anything else is EPERM.
    pub fn caller(&self, creds: Creds, origin: u64) -> OpResult<Caller> {
        match &self.identity {
            Identity::Trusted => Ok(Caller {
                creds,
                trusted: true,
                // A server's step of a client's request names that client.
                origin: if origin != 0 { origin } else { self.origin },
            }),
            Identity::User {
                uid,
                gid,
                groups,
                squashed,
            } => {
                if creds.uid != *uid || creds.gid != *gid {
                    return Err(OpError::denied(
                        Errno::EPERM,
                        format!(
                            "the request claims uid {} gid {} on a connection proven for uid {uid} gid {gid}",
                            creds.uid, creds.gid
                        ),
                    ));
                }
                if let Some(g) = creds.groups.iter().find(|g| !groups.contains(g)) {
                    return Err(OpError::denied(
                        Errno::EPERM,
                        format!("the request claims group {g}, which uid {uid} is not in"),
                    ));
                }
                let creds = if *squashed {
                    let (uid, gid, groups) = self.identity.acts_as().unwrap_or((
                        pvfs_auth::users::NOBODY,
                        pvfs_auth::users::NOBODY,
                        Vec::new(),
                    ));
                    Creds { uid, gid, groups }
                } else {
                    creds
                };
                Ok(Caller {
                    creds,
                    trusted: false,
                    origin: self.origin,
                })
            }
        }
    }
}

impl Caller {
    /// Who this caller is for the lock table: every node holding the key is one
    /// identity (it may act for anyone), a MUNGE-proven user is its uid. Lock owners
    /// and leases are keyed by it, so no user reaches another's locks.
    pub fn lock_who(&self) -> u64 {
        if self.trusted {
            pvfs_proto::LockKey::TRUSTED
        } else {
            pvfs_proto::LockKey::user(self.creds.uid)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(squashed: bool) -> Session {
        Session {
            identity: Identity::User {
                uid: if squashed { 0 } else { 1000 },
                gid: if squashed { 0 } else { 100 },
                groups: if squashed { vec![0] } else { vec![100, 27] },
                squashed,
            },
            peer: "test".into(),
            server: "s0".into(),
            client: "test".into(),
            origin: 0,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn creds(uid: u32, gid: u32, groups: &[u32]) -> Creds {
        Creds {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn a_user_connection_acts_only_as_its_user() {
        let s = user(false);
        let c = s.caller(creds(1000, 100, &[27]), 0).unwrap();
        assert!(!c.trusted);
        assert_eq!(c.creds.groups, vec![27]);
        assert_eq!(
            s.caller(creds(0, 0, &[]), 0).unwrap_err().errno,
            Errno::EPERM
        );
        assert_eq!(
            s.caller(creds(1000, 0, &[]), 0).unwrap_err().errno,
            Errno::EPERM
        );
        assert_eq!(
            s.caller(creds(1000, 100, &[0]), 0).unwrap_err().errno,
            Errno::EPERM
        );
    }

    #[test]
    fn squashed_root_acts_as_nobody_and_a_key_holder_as_it_says() {
        let c = user(true).caller(creds(0, 0, &[]), 0).unwrap();
        assert_eq!(c.creds, creds(65534, 65534, &[65534]));
        let trusted = Session {
            identity: Identity::Trusted,
            peer: "t".into(),
            client: "t".into(),
            server: "s0".into(),
            origin: 0,
            closed: std::sync::atomic::AtomicBool::new(false),
        };
        let c = trusted.caller(creds(0, 0, &[]), 0).unwrap();
        assert!(c.trusted);
        assert_eq!(c.creds.uid, 0);
    }

    #[test]
    fn only_a_key_holder_names_the_client_it_acts_for() {
        let mut mount = user(false);
        mount.origin = 7;
        let claimed = mount.caller(creds(1000, 100, &[]), 9).unwrap();
        assert_eq!(claimed.origin, 7, "a user's connection is its own client");
        mount.identity = Identity::Trusted;
        assert_eq!(mount.caller(creds(0, 0, &[]), 0).unwrap().origin, 7);
        assert_eq!(
            mount.caller(creds(0, 0, &[]), 9).unwrap().origin,
            9,
            "a server's step names the client it is for"
        );
    }
}
