//! The pvfs wire protocol and the arithmetic clients and servers share.
//!
//! - [`frame`]: the 32-byte frame header and its limits;
//! - [`access`]: the POSIX permission rules servers and interfaces share;
//! - [`cap`]: capabilities, the rights servers grant on one object for a while;
//! - [`codec`]: the little-endian, bounds-checked encoding of bodies and records;
//! - [`handshake`]: the messages that open every connection;
//! - [`locks`]: byte-range lock types and the range arithmetic of lock tables;
//! - [`message`]: one [`Request`] enum and one [`Response`] enum;
//! - [`map`]: the cluster map servers answer to clients (which servers are alive);
//! - [`types`], [`attr`], [`layout`], [`regions`]: handles, attributes, layouts,
//!   region lists, and the stripe arithmetic that maps file bytes to datafiles;
//! - [`acl`]: POSIX ACLs, as objects carry them and the permission rules read them.
//!
//! The modules form layers, none naming one above it (`scripts/module-cycles`):
//! [`codec`] at the bottom; the plain types, errnos, regions and locks on it; ACLs on
//! the types; layouts on regions and types; attributes on layouts and ACLs; the
//! permission rules, capabilities and [`message`] on top.
//!
//! The byte-level format is documented in `docs/wire-protocol.md`.

pub mod access;
pub mod acl;
pub mod attr;
pub mod cap;
pub mod clock;
pub mod codec;
pub mod errno;
pub mod feed;
pub mod frame;
pub mod handshake;
pub mod layout;
pub mod locks;
pub mod map;
pub mod message;
pub mod regions;
pub mod types;

pub use attr::{Attr, ObjDetail};
pub use cap::{rights, Capability};
pub use codec::{decode, encode, DecodeError, Wire};
pub use errno::{Errno, ErrorKind};
pub use frame::{FrameError, FrameHeader, FrameKind};
pub use layout::{Datafile, Layout, LayoutSpec, Piece, Stripe};
pub use locks::{LockConflict, LockKey, LockOwner, LockType};
pub use message::{
    req, Changed, CreateWhat, Effect, Flow, LinkDrop, Op, Remains, ReplicateStep, Request,
    RequestBody, Response, RetryKey, Scope, UnlinkWant,
};
pub use regions::{Extent, Regions};
pub use types::{
    fnv1a64, name_shard, Creds, DirEntry, Handle, NodeKind, ObjKind, Roles, SetAttr, ShardStat,
    Timespec,
};

/// The software version, reported by servers and the CLI.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
