//! Requests and responses: one enum each, one variant per operation.
//!
//! A request body is `Creds` followed by a [`Request`]; a response body is a
//! [`Response`]. Bulk data never sits in a body: it follows the body in the same frame
//! and in further `Data` frames (see [`crate::frame`]).

use crate::attr::{Attr, ObjDetail};
use crate::cap::Capability;
use crate::codec::{DecodeError, Reader, Wire};
use crate::errno::ErrorKind;
use crate::layout::{LayoutSpec, Stripe};
use crate::locks::{LockConflict, LockKey, LockOwner, LockType};
use crate::regions::Regions;
use crate::types::{Creds, DirEntry, Handle, NodeKind, ObjKind, Roles, ShardStat, Timespec};
use crate::wire_struct;
use crate::Errno;

/// Defines an enum whose variants all have named fields, and its [`Wire`] form: a u16
/// tag followed by the fields in order.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident : $what:literal {
            $( $(#[$vmeta:meta])* $tag:literal => $var:ident { $($field:ident : $ty:ty),* $(,)? } ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum $name {
            $( $(#[$vmeta])* $var { $($field: $ty),* }, )*
        }

        impl $name {
            /// Every variant's name, in tag order (what [`Self::op_name`] can return).
            pub const OP_NAMES: &'static [&'static str] = &[$(stringify!($var)),*];

            /// The operation's name, for logs and statistics.
            pub fn op_name(&self) -> &'static str {
                match self { $( $name::$var { .. } => stringify!($var), )* }
            }
        }

        impl Wire for $name {
            const MIN_SIZE: usize = 2;
            #[allow(unused_variables)]
            fn put(&self, out: &mut Vec<u8>) {
                match self {
                    $( $name::$var { $($field),* } => {
                        ($tag as u16).put(out);
                        $( $field.put(out); )*
                    } )*
                }
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                match u16::get(r)? {
                    $( $tag => Ok($name::$var { $($field: <$ty as Wire>::get(r)?),* }), )*
                    t => Err(DecodeError::UnknownTag { what: $what, tag: u32::from(t) }),
                }
            }
        }
    };
}

/// Defines [`Request`] from one table: per operation its tag, its fields, what it does
/// to the state of the file system (its [`Effect`]) and how its bytes travel (its
/// [`Flow`]) and what of a server it is about (its [`Scope`]). For each operation it makes a struct of the same name in [`req`] with
/// the fields, an [`Op`] impl declaring the facts, and the variant of [`Request`]
/// wrapping the struct; the [`Wire`] form is a u16 tag followed by the fields in
/// order. An entry without its effect or flow does not compile.
macro_rules! requests {
    (
        $(#[$meta:meta])*
        pub enum Request : $what:literal {
            $( $(#[$vmeta:meta])* $tag:literal => $var:ident { $($field:ident : $ty:ty),* $(,)? }
               effect $effect:ident, flow $flow:ident, scope $scope:ident ),* $(,)?
        }
    ) => {
        /// One struct per operation, holding its fields (what they mean: the variant
        /// of [`Request`] of the same name).
        pub mod req {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$vmeta])*
                #[derive(Clone, Debug, PartialEq, Eq)]
                #[allow(missing_docs)]
                pub struct $var { $(pub $field: $ty),* }

                impl super::Op for $var {
                    const NAME: &'static str = stringify!($var);
                    const TAG: u16 = $tag;
                    const EFFECT: super::Effect = super::Effect::$effect;
                    const FLOW: super::Flow = super::Flow::$flow;
                    const SCOPE: super::Scope = super::Scope::$scope;
                }

                impl From<$var> for super::Request {
                    fn from(r: $var) -> super::Request {
                        super::Request::$var(r)
                    }
                }
            )*
        }

        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Request {
            $( $(#[$vmeta])* $var(req::$var), )*
        }

        impl Request {
            /// Every operation's name, in tag order (what [`Self::op_name`] can return).
            pub const OP_NAMES: &'static [&'static str] = &[$(stringify!($var)),*];

            /// Every operation's name and [`Effect`], in tag order.
            pub const EFFECTS: &'static [(&'static str, Effect)] =
                &[$((stringify!($var), Effect::$effect)),*];

            /// The operation's name, for logs and statistics.
            pub fn op_name(&self) -> &'static str {
                match self { $( Request::$var(_) => stringify!($var), )* }
            }

            /// What the operation does to the file system's state ([`Effect`]).
            pub fn effect(&self) -> Effect {
                match self { $( Request::$var(_) => Effect::$effect, )* }
            }

            /// How the operation's bytes travel ([`Flow`]).
            pub fn flow(&self) -> Flow {
                match self { $( Request::$var(_) => Flow::$flow, )* }
            }

            /// What of a server the operation's kind is about, as the kind declares it
            /// ([`Scope`]); [`Self::scope`] is what this request is about.
            pub fn kind_scope(&self) -> Scope {
                match self { $( Request::$var(_) => Scope::$scope, )* }
            }
        }

        impl Wire for Request {
            const MIN_SIZE: usize = 2;
            #[allow(unused_variables)]
            fn put(&self, out: &mut Vec<u8>) {
                match self {
                    $( Request::$var(req::$var { $($field),* }) => {
                        ($tag as u16).put(out);
                        $( $field.put(out); )*
                    } )*
                }
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                match u16::get(r)? {
                    $( $tag => Ok(Request::$var(req::$var { $($field: <$ty as Wire>::get(r)?),* })), )*
                    t => Err(DecodeError::UnknownTag { what: $what, tag: u32::from(t) }),
                }
            }
        }
    };
}

/// What an operation does to the state of the file system, which decides how it may
/// be retried after a lost answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Changes nothing a client can see (reads, syncs, scans): retried freely.
    None,
    /// Changes state, and doing it again leaves what doing it once left (bytes
    /// written at given offsets, a size set, a lock taken by the same owner, a
    /// width that only grows): retried without a key.
    Idempotent,
    /// Changes state in a way a second run would repeat (a create, a link count, a
    /// handle range): carries a [`RetryKey`], and the server records its answer in the
    /// commit that makes the change, so a retry is answered from the record and done
    /// at most once.
    Once,
}

/// How an operation's bytes travel on its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// One request frame, one answer frame.
    Reply,
    /// The request's data follows in further `Data` frames (a write); one answer.
    DataIn,
    /// The answer streams: a first frame and `Data` frames (a read).
    DataOut,
}

/// What of a server an operation is about, which decides where it goes when a
/// metadata group has failed over (`docs/replication.md`, "Failover").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A metadata group (the server's names, objects, locks, holds and change feed):
    /// sent to the group's primary, which may be a standby that took it over, and
    /// refused by a server that is not the group's primary now.
    Group,
    /// The server itself (its datafiles, its part of the authority, its copies of
    /// other groups, its liveness): always sent to the server itself.
    Server,
}

impl Request {
    /// What of a server this request is about ([`Scope`]), so where it goes once
    /// metadata groups fail over: its kind's, but a `Sync` of metadata alone is about
    /// a group's store and goes where the group is served.
    pub fn scope(&self) -> Scope {
        match self {
            Request::Sync(s) if !s.data => Scope::Group,
            r => r.kind_scope(),
        }
    }
}

/// The facts every operation declares once, in the table of [`Request`]: the
/// operation struct in [`req`] implements it.
pub trait Op: Into<Request> {
    /// The operation's name (the variant's).
    const NAME: &'static str;
    /// Its tag on the wire.
    const TAG: u16;
    /// What it does to the file system's state.
    const EFFECT: Effect;
    /// How its bytes travel.
    const FLOW: Flow;
    /// What of a server it is about.
    const SCOPE: Scope;
}

/// What kind of object `Create` makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateWhat {
    /// A regular file with a layout resolved by the client (size and count set; the
    /// server picks the base server when unset, and the datafile handles).
    File {
        /// Stripe size, stripe count, optional first data server.
        spec: LayoutSpec,
    },
    /// A directory with `shards` dirdata shards and a default layout for its files.
    Dir {
        /// Number of dirdata shards (>= 1).
        shards: u32,
        /// Default layout inherited from the parent (or set later).
        default_layout: Option<LayoutSpec>,
    },
    /// A symbolic link.
    Symlink {
        /// Its target, verbatim.
        target: String,
    },
    /// A FIFO, socket or device node (metadata only).
    Node {
        /// Which kind of special file.
        kind: NodeKind,
        /// Device number of a device node; 0 otherwise.
        rdev: u64,
    },
}

impl Wire for CreateWhat {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            CreateWhat::File { spec } => {
                out.push(1);
                spec.put(out);
            }
            CreateWhat::Dir {
                shards,
                default_layout,
            } => {
                out.push(2);
                shards.put(out);
                default_layout.put(out);
            }
            CreateWhat::Symlink { target } => {
                out.push(3);
                target.put(out);
            }
            CreateWhat::Node { kind, rdev } => {
                out.push(4);
                kind.put(out);
                rdev.put(out);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            1 => Ok(CreateWhat::File {
                spec: Wire::get(r)?,
            }),
            2 => Ok(CreateWhat::Dir {
                shards: Wire::get(r)?,
                default_layout: Wire::get(r)?,
            }),
            3 => Ok(CreateWhat::Symlink {
                target: Wire::get(r)?,
            }),
            4 => Ok(CreateWhat::Node {
                kind: Wire::get(r)?,
                rdev: Wire::get(r)?,
            }),
            t => Err(DecodeError::UnknownTag {
                what: "create kind",
                tag: u32::from(t),
            }),
        }
    }
}

/// Which kinds of object an `Unlink` may remove (unlink(2) vs rmdir(2)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnlinkWant {
    /// Any kind (used by rename's second step).
    Any,
    /// Only a directory (rmdir): otherwise ENOTDIR.
    Dir,
    /// Anything but a directory (unlink): otherwise EISDIR.
    NotDir,
}

impl Wire for UnlinkWant {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(match self {
            UnlinkWant::Any => 0,
            UnlinkWant::Dir => 1,
            UnlinkWant::NotDir => 2,
        });
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            0 => Ok(UnlinkWant::Any),
            1 => Ok(UnlinkWant::Dir),
            2 => Ok(UnlinkWant::NotDir),
            t => Err(DecodeError::UnknownTag {
                what: "unlink kind",
                tag: u32::from(t),
            }),
        }
    }
}

/// What became of an object after it lost a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remains {
    /// Nothing happened to it (no link was taken: the name moved, or nothing was
    /// replaced).
    Untouched,
    /// It still has this many names.
    Names(u32),
    /// No name is left; it is kept (as asked, for a file still open) until
    /// `RemoveObject`.
    Kept,
    /// No name is left and it was deleted: what it was (a file's layout tells which
    /// datafiles to delete).
    Deleted(ObjDetail),
    /// Its owner could not be asked: it keeps a link too many until fsck repairs the
    /// count.
    Unknown,
}

impl Wire for Remains {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Remains::Untouched => out.push(0),
            Remains::Names(n) => {
                out.push(1);
                n.put(out);
            }
            Remains::Kept => out.push(2),
            Remains::Deleted(d) => {
                out.push(3);
                d.put(out);
            }
            Remains::Unknown => out.push(4),
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            0 => Ok(Remains::Untouched),
            1 => Ok(Remains::Names(Wire::get(r)?)),
            2 => Ok(Remains::Kept),
            3 => Ok(Remains::Deleted(Wire::get(r)?)),
            4 => Ok(Remains::Unknown),
            t => Err(DecodeError::UnknownTag {
                what: "link outcome",
                tag: u32::from(t),
            }),
        }
    }
}

/// What happens to the object when an `Unlink` removes one of its names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkDrop {
    /// The name moved (the second step of a rename): the object keeps its links.
    Moved,
    /// One link less; at zero the object stays (a file still open somewhere) until
    /// `RemoveObject` deletes it.
    Keep,
    /// One link less; at zero the object is deleted.
    Delete,
    /// As `Delete`, and the caller's client lets go of its own hold of the object
    /// (one it kept after its last close), in the same commit: only other clients'
    /// holds keep the object.
    Release,
}

impl Wire for LinkDrop {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(match self {
            LinkDrop::Moved => 0,
            LinkDrop::Keep => 1,
            LinkDrop::Delete => 2,
            LinkDrop::Release => 3,
        });
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            0 => Ok(LinkDrop::Moved),
            1 => Ok(LinkDrop::Keep),
            2 => Ok(LinkDrop::Delete),
            3 => Ok(LinkDrop::Release),
            t => Err(DecodeError::UnknownTag {
                what: "link drop",
                tag: u32::from(t),
            }),
        }
    }
}

requests! {
    /// Every operation a server answers. Metadata operations go to the metadata server
    /// owning the handle (or, for names, the dirdata shard owning the name); data
    /// operations go to the data server holding the datafile.
    pub enum Request: "request" {
        /// Liveness and identity.
        1 => Ping {} effect None, flow Reply, scope Server,
        /// Space and object counts of this server's storage.
        2 => StatFs {} effect None, flow Reply, scope Server,
        /// Looks a name up in the shard of `dir` this server holds (the caller needs
        /// search permission on `dir`). `want`: the rights ([`rights`]) the caller
        /// asks on the object found; the answer's capabilities grant those of them it
        /// may have.
        10 => Lookup { dir: Handle, name: String, want: u32 } effect None, flow Reply, scope Group,
        /// Attributes of one object; with `want`, capabilities too (a caller that
        /// does not hold the key shows `proof`: a VISIT capability from the lookup of
        /// its name, or one it holds on the object already, expired or not).
        11 => GetAttr { handle: Handle, want: u32, proof: Option<Capability> } effect None, flow Reply, scope Group,
        /// Attributes of many objects on this server (readdirplus phase 1).
        12 => ListAttr { handles: Vec<Handle> } effect None, flow Reply, scope Group,
        /// Changes mode, owner, group or times.
        13 => SetAttr { handle: Handle, set: crate::types::SetAttr } effect Once, flow Reply, scope Group,
        /// Creates an object and its entry `name` in `parent` atomically. `umask`
        /// applies to `mode` unless `parent` has a default ACL (which then decides).
        /// `hold`: for a file the caller opens as it creates it, the generation of
        /// its hold (as `Hold`; 0: none), registered before the name is visible.
        14 => Create { parent: Handle, name: String, mode: u32, umask: u32, uid: u32, gid: u32, what: CreateWhat, hold: u64 } effect Once, flow Reply, scope Group,
        /// Removes entry `name` of `dir`; `fate` says what the object loses (in the
        /// same commit when it lives here, otherwise this server asks its owner).
        /// `expect` guards against a concurrent change of the entry.
        15 => Unlink { dir: Handle, name: String, expect: Option<Handle>, want: UnlinkWant, fate: LinkDrop } effect Once, flow Reply, scope Group,
        /// Adds entry `name` -> `handle`; with `replace`, the existing entry must name
        /// that handle and is replaced (its object losing a link as `fate` says),
        /// otherwise the name must be free. With `counted` (a file moved by a rename),
        /// `handle` gains a link for the new name (at its owner, before the commit),
        /// which the removal of its old name then takes (`Unlink` with fate `Keep`):
        /// a crash between the steps leaves a counted hard link, never a name whose
        /// link is missing. `ticket`: MOVE on `handle` (from the lookup of the name it
        /// is moved from).
        16 => LinkEntry { dir: Handle, name: String, handle: Handle, kind: ObjKind, replace: Option<Handle>, fate: LinkDrop, counted: bool, ticket: Option<Capability> } effect Once, flow Reply, scope Group,
        /// Moves an entry when both names are in shards on this server (one commit);
        /// a replaced object loses a link as `fate` says.
        17 => Rename { src_dir: Handle, src_name: String, dst_dir: Handle, dst_name: String, expect_src: Handle, replace: Option<Handle>, fate: LinkDrop } effect Once, flow Reply, scope Group,
        /// One page of the entries of `dir` this server holds, after name `after`. A
        /// metadata server holds at most one shard of a directory, so the server lists
        /// every entry of `dir` it has and does not read `shard`: the client fills in
        /// the shard it expects there, for logs and packet captures.
        18 => ReadDir { dir: Handle, shard: u32, after: Option<String>, max: u32 } effect None, flow Reply, scope Group,
        /// Seals (refuses new entries if empty) or unseals this server's shard of `dir`.
        /// `ticket`: REMOVE on `dir` (from the lookup of its name).
        19 => SealDir { dir: Handle, seal: bool, ticket: Option<Capability> } effect Once, flow Reply, scope Group,
        /// Records a directory's new parent after a rename. `ticket`: MOVE on `dir`.
        20 => SetParent { dir: Handle, parent: Handle, ticket: Option<Capability> } effect Once, flow Reply, scope Group,
        /// Sets or clears a directory's default layout.
        21 => SetDirLayout { dir: Handle, layout: Option<LayoutSpec> } effect Once, flow Reply, scope Group,
        /// Deletes an object that has no link left (kept by an unlink for a file
        /// still open; EBUSY while it has a name). `ticket`: REMOVE on it (from the
        /// unlink that removed its last name).
        22 => RemoveObject { handle: Handle, ticket: Option<Capability> } effect Once, flow Reply, scope Group,
        /// Forget cached attributes of these objects: their owner changed who may use
        /// them (servers cache the attributes of directories they hold shards of).
        23 => Forget { handles: Vec<Handle> } effect Idempotent, flow Reply, scope Group,
        /// Hard link: adds entry `name` -> `handle` to `dir` (the name must be free),
        /// `handle` gaining a link first at its owner (the server holding the name
        /// asks it). The caller needs write and search permission on `dir`, and to own
        /// the object or be allowed to read and write it (Linux's protected hard
        /// links); one without the key shows `proof`: a VISIT capability from the
        /// lookup of a name of the object.
        24 => Link { dir: Handle, name: String, handle: Handle, proof: Option<Capability> } effect Once, flow Reply, scope Group,
        /// One more link on a local object, for a new name the sender is about to put
        /// in place (servers only: the server holding the new name sends it, with the
        /// caller's credentials). With `moving` (a rename's new name, whose MOVE ticket
        /// the sender checked), the caller need not be allowed to hard-link the object.
        25 => AddLink { handle: Handle, moving: bool } effect Once, flow Reply, scope Group,
        /// One link less on a local object whose name the sender removed; at zero
        /// links it is deleted, unless `keep` (servers only).
        26 => DropLink { handle: Handle, keep: bool } effect Once, flow Reply, scope Group,
        /// Sets an object's link count to `links` if it is `expect` (fsck's repair; at
        /// zero the object is deleted).
        27 => SetLinks { handle: Handle, links: u32, expect: u32 } effect Once, flow Reply, scope Group,
        /// What this server's shards of `dirs` add to their attributes (change time,
        /// subdirectories), in request order: for a directory's exact times and link
        /// count (its owner merges its own shard into the attributes it answers).
        28 => DirStats { dirs: Vec<Handle> } effect None, flow Reply, scope Group,
        /// Widens regular file `handle`'s layout to at least `width` datafiles (never
        /// narrows it), before a client writes, extends or preallocates bytes past
        /// its width; answered with the file's attributes (their layout shows the
        /// width now). `cap`: WRITE on the file (from its open).
        29 => Widen { handle: Handle, width: u32, cap: Option<Capability> } effect Idempotent, flow Reply, scope Group,
        /// Reserves `count` datafile handles on this data server (precreate pool).
        30 => Precreate { count: u32 } effect Once, flow Reply, scope Group,
        /// Writes the bytes of `regions` held by datafile `index` of a `stripe`; the
        /// data follows in this frame and further Data frames, in stream order. `cap`:
        /// WRITE on the datafile. `copies`: for a datafile with more than one copy,
        /// where they are; the head of their chain writes and forwards it along the
        /// chain, and answers once the tail has it.
        31 => Write { handle: Handle, stripe: Stripe, index: u32, regions: Regions, sync: bool, cap: Option<Capability>, copies: crate::map::Copies } effect Idempotent, flow DataIn, scope Server,
        /// Reads the bytes of `regions` held by datafile `index`; streamed back. `cap`:
        /// READ on the datafile. `copies`: as `Write`'s; any copy that is up serves.
        32 => Read { handle: Handle, stripe: Stripe, index: u32, regions: Regions, cap: Option<Capability>, copies: crate::map::Copies } effect None, flow DataOut, scope Server,
        /// Local sizes and modification times of datafiles. `map`: the sender's map
        /// version when some of them have more than one copy (only a copy that is up
        /// answers).
        33 => GetSizes { handles: Vec<Handle>, map: Option<u64> } effect None, flow Reply, scope Server,
        /// Sets datafile `index` to its share of a file of `size` bytes. `cap`: WRITE
        /// on the datafile.
        34 => Truncate { handle: Handle, stripe: Stripe, index: u32, size: u64, cap: Option<Capability>, copies: crate::map::Copies } effect Idempotent, flow Reply, scope Server,
        /// Deletes datafiles (after their file was removed). `tickets`: REMOVE on
        /// each (from the removal of the file).
        35 => RemoveDatafiles { handles: Vec<Handle>, tickets: Vec<Capability> } effect Idempotent, flow Reply, scope Server,
        /// Makes datafiles durable. `verifier`: the data server's write verifier the
        /// caller saw when it wrote them (0: none); a data server whose verifier is
        /// another now lost power since those writes, and may have lost what was not
        /// synced: it answers EIO instead of a durability it cannot give.
        36 => Fsync { handles: Vec<Handle>, verifier: u64 } effect None, flow Reply, scope Server,
        /// Makes every change this server acknowledged before it stable on disk: its
        /// metadata redo log synced and, with `data`, every datafile's written bytes
        /// (a `syncfs` of its storage). Sent by a client's fsync (metadata only, to
        /// every metadata group) and syncfs (to every server). Changes nothing.
        /// Without `data` it is about a metadata group's store, wherever the group is
        /// served ([`Request::scope`]); with `data`, about the server itself.
        38 => Sync { data: bool } effect None, flow Reply, scope Server,
        /// fallocate(2) on datafile `index`'s share of the file bytes `offset ..
        /// offset + len` (a contiguous run of the datafile), with fallocate's `mode`
        /// ([`falloc`]). `cap`: WRITE on the datafile.
        37 => Fallocate { handle: Handle, stripe: Stripe, index: u32, offset: u64, len: u64, mode: u32, cap: Option<Capability>, copies: crate::map::Copies } effect Idempotent, flow Reply, scope Server,
        /// The value of an extended attribute (ENODATA if absent).
        40 => GetXattr { handle: Handle, name: String } effect None, flow Reply, scope Group,
        /// Sets an extended attribute; `flags` as setxattr(2): XATTR_CREATE (1) fails
        /// with EEXIST if it exists, XATTR_REPLACE (2) with ENODATA if it does not.
        41 => SetXattr { handle: Handle, name: String, value: Vec<u8>, flags: u32 } effect Once, flow Reply, scope Group,
        /// The names of an object's extended attributes.
        42 => ListXattr { handle: Handle } effect None, flow Reply, scope Group,
        /// Removes an extended attribute (ENODATA if absent).
        43 => RemoveXattr { handle: Handle, name: String } effect Once, flow Reply, scope Group,
        /// A page of every object on this metadata server, handles after `after` (fsck).
        50 => ScanObjects { after: Option<Handle>, max: u32 } effect None, flow Reply, scope Group,
        /// A page of every directory entry on this server, after (dir, name) (fsck).
        51 => ScanEntries { after: Option<(Handle, String)>, max: u32 } effect None, flow Reply, scope Group,
        /// A page of the datafiles present on this data server, after `after` (fsck).
        52 => ScanDatafiles { after: Option<Handle>, max: u32 } effect None, flow Reply, scope Server,
        /// Every sealed directory shard on this server (fsck).
        53 => ScanSeals {} effect None, flow Reply, scope Group,
        /// Creates missing datafiles, empty (fsck's repair of lost ones).
        54 => CreateDatafiles { handles: Vec<Handle> } effect Idempotent, flow Reply, scope Server,
        /// Takes, upgrades or downgrades a byte-range lock on an object of this
        /// metadata server (`end` inclusive, `TO_EOF` to the end of the file).
        /// `flags`: `LOCK_WAIT` (answer `Locked` once granted, or `LockWaiting`
        /// after a bounded time: send it again at once, the place in the queue is
        /// kept), `LOCK_RECLAIM` (in the grace period after a restart: a lock held
        /// before), `LOCK_POSIX` (a record lock, whose waits are checked for
        /// deadlocks), `LOCK_APPEND` (an appender's lock, apart from the locks
        /// programs take; not with `LOCK_POSIX`). The caller needs read permission for a read lock and write
        /// permission for a write lock; `proof`: a capability on the object (one
        /// granting the right counts even if the mode no longer does).
        60 => Lock { handle: Handle, owner: LockOwner, typ: LockType, start: u64, end: u64, pid: u32, flags: u32, proof: Option<Capability> } effect Idempotent, flow Reply, scope Group,
        /// Releases what the owner holds on `start ..= end` of the object (splitting
        /// locks that reach beyond it); `flags`: `LOCK_APPEND` for an appender's lock.
        61 => Unlock { handle: Handle, owner: LockOwner, start: u64, end: u64, flags: u32 } effect Idempotent, flow Reply, scope Group,
        /// The first lock of another owner that keeps `owner` from taking `typ` on
        /// the range (F_GETLK). The caller needs read or write permission.
        62 => TestLock { handle: Handle, owner: LockOwner, typ: LockType, start: u64, end: u64, proof: Option<Capability> } effect None, flow Reply, scope Group,
        /// Withdraws the owner's waiting `Lock` of exactly this type and range: a
        /// request waiting for it is answered EINTR.
        63 => CancelLock { handle: Handle, owner: LockOwner, typ: LockType, start: u64, end: u64 } effect Idempotent, flow Reply, scope Group,
        /// Keeps the lease of `client` (the caller's own) on this server; with
        /// `release`, drops every lock and wait of the client here instead.
        64 => RenewLease { client: u64, release: bool } effect Idempotent, flow Reply, scope Group,
        /// To the coordinating metadata server: `waiter` (a POSIX lock owner) waits,
        /// at `server` for object `handle`, for locks of `blockers` (none: it no
        /// longer waits there). EDEADLK if that closes a cycle of waits.
        65 => WaitFor { waiter: LockKey, blockers: Vec<LockKey>, server: u32, handle: Handle } effect Idempotent, flow Reply, scope Group,
        /// A page of the datafiles this data server created and did not remove that
        /// are missing from its disk (lost, not holes), after `after` (fsck).
        55 => ScanLost { after: Option<Handle>, max: u32 } effect None, flow Reply, scope Server,
        /// The size and CRC32C of each datafile's local bytes, each read whole under
        /// the datafile's lock, so no change is half in it (fsck's comparison of the
        /// copies of a datafile; a missing one is empty). Key holders only.
        56 => SumDatafiles { handles: Vec<Handle> } effect None, flow Reply, scope Server,
        /// Makes this server's copy of datafile `handle` (whose copies are on
        /// `copies`, in layout order) what the copy on server `from` holds, under its
        /// lock here (fsck's repair of a copy that differs). Key holders only.
        57 => CopyDatafile { handle: Handle, copies: Vec<u32>, from: u32 } effect Idempotent, flow Reply, scope Server,
        /// Checks every block of datafiles `handles` against its checksum, mending a
        /// damaged one from another copy (`copies[i]`: the servers of `handles[i]`'s
        /// copies in layout order, empty for one copy), from byte `from` of the
        /// first, paced by `[replication] scrub_bandwidth`; the server stops after
        /// a third of its request timeout, saying where. `pass`: the scrub's
        /// number; `flags`: [`scrub::FIRST`] on a pass's first request to this
        /// server, [`scrub::LAST`] on its last (a pass that reached this server
        /// whole makes sums left unsure by a reboot sure again). Key holders only.
        58 => Scrub { handles: Vec<Handle>, copies: Vec<Vec<u32>>, from: u64, pass: u64, flags: u32 } effect Idempotent, flow Reply, scope Server,
        /// Starts draining server `server` (`pvfs server drain`): the authority
        /// names its heirs, which take copies of all it holds while it serves on;
        /// it is retired once they hold them. Answered with the map after it
        /// (`Map`). Key holders only.
        59 => Drain { server: u32 } effect Idempotent, flow Reply, scope Server,
        /// The changes this server made since position `since` of its change feed
        /// `epoch` that other clients caused (for the caches of a mount): answered
        /// at once when there are some, otherwise when one comes or after `wait_ms`
        /// (the server waits at most a third of its request timeout). Epoch 0 asks
        /// where the feed stands now. Key-holding nodes only: it names entries of
        /// every directory.
        66 => Changes { epoch: u64, since: u64, wait_ms: u32 } effect None, flow Reply, scope Group,
        /// The caller's client has object `handle` of this metadata server open: the
        /// object outlives its last name until the client lets go (`Unhold`), ends
        /// cleanly, or its lease ends. `gen`: from a counter of the client's, so a
        /// late `Unhold` sent before this one is ignored. ESTALE when the object is
        /// gone, EISDIR for a directory. A caller without the key shows `proof`: a
        /// capability on the object. Answered with the client's lease and the
        /// file's attributes.
        67 => Hold { handle: Handle, gen: u64, proof: Option<Capability> } effect Idempotent, flow Reply, scope Group,
        /// The caller's client closed these objects (`handles[i]` held with a
        /// generation below `gens[i]`): an object left without a name and without a
        /// hold is deleted.
        68 => Unhold { handles: Vec<Handle>, gens: Vec<u64> } effect Idempotent, flow Reply, scope Group,
        /// A page of the objects of this metadata server that clients hold open,
        /// after `after` (fsck: an object without a name that is held is a file
        /// unlinked while open, not an orphan).
        69 => ScanHeld { after: Option<Handle>, max: u32 } effect None, flow Reply, scope Group,
        /// A message of the authority (`docs/replication.md`): raft's between its
        /// members, and a server's lease renewal or proposal to them. The body is the
        /// authority's own encoding (servers only).
        70 => Authority { body: Vec<u8> } effect Idempotent, flow Reply, scope Server,
        /// The newest cluster map this server knows (EOPNOTSUPP when the file system
        /// has no authority).
        71 => GetMap {} effect None, flow Reply, scope Server,
        /// From a server catching up (`server`, recovering under map version `map`):
        /// first drops the records it copied (`done`), then answers up to `max`
        /// records of what it missed of datafiles this server holds a copy of
        /// (`docs/replication.md`, "Self-healing"). Servers only.
        72 => Missed { server: u32, map: u64, done: Vec<crate::map::MissedDone>, max: u32 } effect Idempotent, flow Reply, scope Server,
        /// From the primary of metadata group `group` (the metadata of server
        /// `group`) to one of its standbys: a step of its copy of the group's store,
        /// of the primary's log generation `epoch` (`docs/replication.md`,
        /// "Metadata: a primary and standbys"). ESTALE: the standby needs a new
        /// copy. Servers only.
        73 => Replicate { group: u32, epoch: u64, step: ReplicateStep } effect Idempotent, flow Reply, scope Server,
        /// `pvfs rebalance`: hands each server of `to` (none: every data server
        /// added to the file system and handed nothing yet) a share of every other
        /// data server's places (`docs/replication.md`, "Rebalance"). Answered with
        /// the map after it (`Map`). Key holders only.
        74 => Rebalance { to: Vec<u32> } effect Idempotent, flow Reply, scope Server,
    }
}

/// Identity of a server, answered to `Ping`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Server name from the configuration.
    pub name: String,
    /// Roles it plays.
    pub roles: Roles,
    /// File system it serves.
    pub fsid: u64,
    /// Software version.
    pub version: String,
}
wire_struct!(ServerInfo {
    name: String,
    roles: Roles,
    fsid: u64,
    version: String,
});

/// Whether a server works fully ([`Health`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HealthState {
    /// Everything works.
    #[default]
    Ok,
    /// The server answers, but part of it fails (e.g. its metadata store after a full
    /// disk): requests that need that part fail with `Health::errno`.
    Degraded,
}

impl HealthState {
    /// `"ok"` or `"degraded"`.
    pub fn name(self) -> &'static str {
        match self {
            HealthState::Ok => "ok",
            HealthState::Degraded => "degraded",
        }
    }
}

impl Wire for HealthState {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(match self {
            HealthState::Ok => 0,
            HealthState::Degraded => 1,
        });
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            0 => Ok(HealthState::Ok),
            1 => Ok(HealthState::Degraded),
            t => Err(DecodeError::UnknownTag {
                what: "health state",
                tag: u32::from(t),
            }),
        }
    }
}

/// How a server is doing, answered with `Pong` and `StatFs`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Ok or degraded.
    pub state: HealthState,
    /// The errno requests that need the failed part get (0 when ok).
    pub errno: u32,
    /// One line: what fails and what the server does about it, e.g. "metadata store
    /// failed: No space left on device; retrying" (empty when ok).
    pub reason: String,
    /// Seconds since the server became degraded (0 when ok).
    pub since_secs: u64,
}
wire_struct!(Health {
    state: HealthState,
    errno: u32,
    reason: String,
    since_secs: u64,
});

impl Health {
    /// Whether everything works.
    pub fn is_ok(&self) -> bool {
        self.state == HealthState::Ok
    }
}

/// Space and object counts of one server's storage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatFsReply {
    /// Bytes of the storage file system.
    pub total_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// Bytes available to unprivileged users.
    pub avail_bytes: u64,
    /// Metadata objects stored (directories, metafiles, symlinks).
    pub objects: u64,
    /// Datafiles present on disk.
    pub datafiles: u64,
    /// Free inodes of the storage file system.
    pub free_inodes: u64,
    /// Which file system the storage lives on, as seen by this server's running
    /// kernel (a hash of its boot id, the device and the file system id; 0 when
    /// unknown): servers storing on one file system answer the same value, so a
    /// client adds that space up once.
    pub fs_id: u64,
    /// The checksums of this server's datafiles are unsure since a reboot, until a
    /// whole `pvfs scrub` (`docs/storage-format.md`, "Checksums").
    pub sums_unsure: bool,
    /// The rebuild under way here of copies that lost servers held, if any.
    pub rebuilding: Option<Rebuilding>,
    /// The metadata groups this server serves as their primary, with where each of
    /// their standbys stands (empty without copies).
    pub groups: Vec<GroupCopies>,
    /// The refill under way here of every copy this server holds (a new disk, or a
    /// lost server back), if any; its `lost` is empty.
    pub refilling: Option<Rebuilding>,
}
wire_struct!(StatFsReply {
    total_bytes: u64,
    free_bytes: u64,
    avail_bytes: u64,
    objects: u64,
    datafiles: u64,
    free_inodes: u64,
    fs_id: u64,
    sums_unsure: bool,
    rebuilding: Option<Rebuilding>,
    groups: Vec<GroupCopies>,
    refilling: Option<Rebuilding>,
});

/// A metadata group the answering server serves as its primary, and its standbys
/// (`docs/replication.md`, "Metadata: a primary and standbys"), for `pvfs status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupCopies {
    /// The group, by its server's index.
    pub group: u32,
    /// Every other server holding a place in the group.
    pub standbys: Vec<StandbyCopy>,
}
wire_struct!(GroupCopies {
    group: u32,
    standbys: Vec<StandbyCopy>,
});

/// Where one standby of a metadata group stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StandbyCopy {
    /// The standby.
    pub server: u32,
    /// It holds a whole copy and every commit acknowledged (a second copy of the
    /// group); otherwise it is down or its copy is under way.
    pub following: bool,
    /// Bytes sent of the copy under way (0 when none is).
    pub copied: u64,
    /// Bytes of the copy under way (0 when none is).
    pub total: u64,
}
wire_struct!(StandbyCopy {
    server: u32,
    following: bool,
    copied: u64,
    total: u64,
});

/// How far a server is in rebuilding the copies it takes of lost servers
/// (`docs/replication.md`, "Rebuild"), or in refilling its own, for `pvfs status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebuilding {
    /// The lost servers whose copies it rebuilds.
    pub lost: Vec<u32>,
    /// Datafiles to copy in this pass, as counted at its start.
    pub datafiles_total: u64,
    /// Datafiles copied (or found copied by an earlier pass).
    pub datafiles_done: u64,
    /// Bytes to copy in this pass, as the sources' sizes were at its start.
    pub bytes_total: u64,
    /// Bytes copied.
    pub bytes_done: u64,
    /// Milliseconds since the pass began copying.
    pub elapsed_ms: u64,
}
wire_struct!(Rebuilding {
    lost: Vec<u32>,
    datafiles_total: u64,
    datafiles_done: u64,
    bytes_total: u64,
    bytes_done: u64,
    elapsed_ms: u64,
});

/// Attributes of one object of a `ListAttr`, or why they are missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrResult {
    /// 0 on success, else the errno.
    pub errno: u32,
    /// The attributes when `errno` is 0.
    pub attr: Option<Attr>,
}
wire_struct!(AttrResult {
    errno: u32,
    attr: Option<Attr>,
});

/// Size, modification time and allocated space of one datafile (0, epoch, 0 when it
/// holds no bytes yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatafileStat {
    /// Local size in bytes.
    pub size: u64,
    /// Last modification of its bytes.
    pub mtime: Timespec,
    /// Bytes the data server's file system allocates for it (`st_blocks` × 512 of
    /// the local file): less than `size` for a sparse datafile, more after
    /// preallocation past its end. Summed by clients into a file's block count.
    pub allocated: u64,
}
wire_struct!(DatafileStat {
    size: u64,
    mtime: Timespec,
    allocated: u64,
});

wire_enum! {
    /// Every reply a server sends.
    pub enum Response: "response" {
        /// The operation failed with a POSIX errno.
        1 => Error { errno: u32, kind: ErrorKind, message: String },
        /// Done; nothing to return.
        2 => Done {},
        /// Answer to `Ping`: who the server is and how it is doing.
        3 => Pong { info: ServerInfo, health: Health },
        /// Answer to `StatFs`: its space and objects, and how it is doing (`objects`
        /// is 0 while its metadata store is failed).
        4 => StatFs { stat: StatFsReply, health: Health },
        /// Answer to `Lookup`: the entry, the object's attributes if it lives here, and
        /// the capabilities granted. Capabilities in answers (`Entry`, `Attr`,
        /// `Created`) come in one order: the first is on the object with every right
        /// granted; for a regular file granted READ or WRITE, one per datafile
        /// follows, in layout order. An object that lives elsewhere gets a VISIT
        /// capability, for its owner.
        10 => Entry { entry: DirEntry, attr: Option<Attr>, caps: Vec<Capability> },
        /// Answer to `GetAttr` and `SetAttr`, with the capabilities granted.
        11 => Attr { attr: Attr, caps: Vec<Capability> },
        /// Answer to `ListAttr`, in request order: for all handles asked, or for a
        /// prefix of them when all would not fit one answer (ask again for the rest).
        12 => Attrs { attrs: Vec<AttrResult> },
        /// Answer to `Create`, with read and write capabilities for the creator.
        13 => Created { attr: Attr, caps: Vec<Capability> },
        /// Answer to `Unlink`: the removed entry; what became of its object; `tickets`:
        /// REMOVE on what the client deletes next (a deleted file's datafiles, or the
        /// object kept at zero links); `changed`: the time stamped on the directory's
        /// shard (its new mtime and ctime).
        14 => Unlinked { entry: DirEntry, left: Remains, tickets: Vec<Capability>, changed: Timespec },
        /// Answer to `LinkEntry` and `Rename`: the entry that was replaced, if any,
        /// and what became of its object (as `Unlinked`); `changed`: the time stamped
        /// on the directories' shards.
        15 => Linked { replaced: Option<DirEntry>, left: Remains, tickets: Vec<Capability>, changed: Timespec },
        /// Answer to `ReadDir`.
        16 => DirPage { entries: Vec<DirEntry>, more: bool },
        /// Answer to `RemoveObject`: what was deleted, and REMOVE tickets for its
        /// datafiles.
        17 => Removed { detail: ObjDetail, tickets: Vec<Capability> },
        /// Answer to `DirStats`, in request order.
        18 => ShardStats { stats: Vec<ShardStat> },
        /// Answer to `DropLink` and `SetLinks`: what became of the object, and REMOVE
        /// tickets for a deleted file's datafiles (or for the object when kept).
        19 => Dropped { left: Remains, tickets: Vec<Capability> },
        /// Answer to `Link`: the object's attributes (with its new link count), and
        /// the time stamped on the directory's shard.
        20 => HardLinked { attr: Attr, changed: Timespec },
        /// Answer to `Precreate`: handles `first .. first + count`.
        30 => Handles { first: Handle, count: u32 },
        /// Answer to `Write` (and, with 0 bytes, `Truncate` and `Fallocate`): bytes
        /// written, and the datafile's size, modification time and allocation after
        /// them (a client that knows every datafile's knows the file's attributes
        /// without asking), and the data server's write verifier: a number that
        /// changes only when the server's storage may have lost unsynced writes (a
        /// power loss: the machine's boot), which the client's `Fsync` shows back.
        31 => Written { bytes: u64, stat: DatafileStat, verifier: u64 },
        /// First frame of the answer to `Read`: the datafile's local size. The stream
        /// that follows holds the requested pieces cut at that size.
        32 => ReadStart { local_size: u64 },
        /// Answer to `GetSizes`, in request order.
        33 => Sizes { sizes: Vec<DatafileStat> },
        /// Answer to `GetXattr`.
        40 => Xattr { value: Vec<u8> },
        /// Answer to `ListXattr`, sorted.
        41 => XattrNames { names: Vec<String> },
        /// Answer to `ScanObjects`: a page, and whether more follow.
        50 => Objects { attrs: Vec<Attr>, more: bool },
        /// Answer to `ScanEntries`: (directory, entry) pairs, and whether more follow.
        51 => Entries { entries: Vec<(Handle, DirEntry)>, more: bool },
        /// Answer to `ScanDatafiles`, `ScanLost`, `ScanSeals` and `ScanHeld`: handles, and whether
        /// more follow.
        52 => HandleList { handles: Vec<Handle>, more: bool },
        /// Answer to `SumDatafiles`, in request order: (size, CRC32C) of each;
        /// `damaged`: those whose copy here has a block that does not match its
        /// checksum (their sum is (0, 0)).
        53 => Sums { sums: Vec<(u64, u32)>, damaged: Vec<Handle> },
        /// Answer to `Scrub`: how many of the datafiles it finished, and the byte of
        /// the next one it reached (when it stopped for time); bytes checked; blocks
        /// found damaged; of them, those mended from another copy and those summed
        /// again (sums unsure since a reboot, no other copy); (datafile, offset) of
        /// each block left damaged; whether this server's sums are unsure after it.
        58 => Scrubbed { done: u32, at: u64, bytes: u64, damaged: u64, mended: u64, resummed: u64, unmended: Vec<(Handle, u64)>, unsure: bool },
        /// Answer to `Lock`: granted. `lease`: the id of the client's lease here
        /// (random per lease: a new id means the server forgot the client's earlier
        /// locks, after a restart or a lease that ended).
        60 => Locked { lease: u64 },
        /// Answer to a waiting `Lock` (or a `TestLock` in the grace period) after
        /// the server's bounded wait: not granted yet; send it again at once.
        /// `grace`: the server is in its grace period after a restart (only reclaims
        /// are granted).
        61 => LockWaiting { lease: u64, grace: bool },
        /// Answer to `TestLock`: the lock in the way, if any.
        62 => LockTest { conflict: Option<LockConflict> },
        /// Answer to `RenewLease`: the id of the client's lease, renewed (0: the
        /// server does not know it: restarted, or the lease ended), and whether the
        /// server is in its grace period (an unknown lease then means: reclaim).
        63 => Lease { lease: u64, grace: bool },
        /// Answer to `Changes`: the feed's `epoch` (a new one each time the server
        /// starts), the position to ask from next, whether changes were lost since
        /// the position asked (another epoch, or more changes than the server keeps:
        /// drop everything cached from this server), and the changes, oldest first.
        64 => Changes { epoch: u64, next: u64, lost: bool, changes: Vec<Changed> },
        /// Answer to `Hold`: the client's lease (as in `Lease`) and the file's
        /// attributes (size not filled in, as `GetAttr`), so an open asks once.
        65 => Held { lease: u64, grace: bool, attr: Attr },
        /// Answer to a `Lock` with `LOCK_APPEND`: granted, as `Locked`; `width`: the
        /// file's width now (its datafiles past it hold no byte), so the appender
        /// asks only those that may for the end of the file.
        66 => AppendLocked { lease: u64, width: u32 },
        /// Answer to `Authority`: the authority's answer, in its own encoding.
        70 => Authority { body: Vec<u8> },
        /// Answer to `GetMap`.
        71 => Map { map: crate::map::ClusterMap },
        /// Answer to `Missed`: records, and whether more are left.
        72 => Missed { records: Vec<crate::map::MissedRecord>, more: bool },
        /// Answer to `Replicate`: the number of the last record of the primary's log
        /// the standby holds (0 while a copy comes in).
        73 => Replicated { through: u64 },
    }
}

wire_enum! {
    /// One step of a metadata primary's copy of its store to a standby (`Replicate`).
    pub enum ReplicateStep: "replicate step" {
        /// A new copy of the primary's database file, `len` bytes long, begins.
        1 => Begin { len: u64 },
        /// Bytes of the copy, at `offset`.
        2 => Chunk { offset: u64, data: Vec<u8> },
        /// The copy is whole; record `next` of the primary's log is the first to
        /// replay over it.
        3 => End { next: u64 },
        /// Records of the primary's log, back to back, in order.
        4 => Records { records: Vec<u8> },
    }
}

/// fallocate(2) modes a `Fallocate` may carry (Linux's flag values), and the checks
/// clients and data servers share.
pub mod falloc {
    use crate::Errno;

    /// Allocate without changing the size.
    pub const KEEP_SIZE: u32 = 0x01;
    /// Deallocate the range (it reads as zeros); only with `KEEP_SIZE`.
    pub const PUNCH_HOLE: u32 = 0x02;
    /// Zero the range, allocating it (extends the size unless `KEEP_SIZE`).
    pub const ZERO_RANGE: u32 = 0x10;

    /// Checks a fallocate call the way Linux's `vfs_fallocate` does: EINVAL for an
    /// empty range, EOPNOTSUPP for a mode pvfs does not offer (anything but 0,
    /// `KEEP_SIZE`, `PUNCH_HOLE | KEEP_SIZE`, `ZERO_RANGE` and `ZERO_RANGE |
    /// KEEP_SIZE`: collapsing or inserting ranges would move bytes between
    /// datafiles), EFBIG for a range ending past the largest file size.
    pub fn check(mode: u32, offset: u64, len: u64) -> Result<(), (Errno, &'static str)> {
        if len == 0 {
            return Err((Errno::EINVAL, "fallocate of 0 bytes"));
        }
        let supported = [
            0,
            KEEP_SIZE,
            PUNCH_HOLE | KEEP_SIZE,
            ZERO_RANGE,
            ZERO_RANGE | KEEP_SIZE,
        ];
        if !supported.contains(&mode) {
            return Err((Errno::EOPNOTSUPP, "fallocate mode not supported"));
        }
        match offset.checked_add(len) {
            Some(end) if end <= crate::regions::MAX_FILE_SIZE => Ok(()),
            _ => Err((Errno::EFBIG, "fallocate range past the largest file size")),
        }
    }

    /// Whether `mode` may create a datafile that does not exist yet: allocation
    /// does, punching or zeroing bytes of a missing (all-hole) datafile while
    /// keeping the size has nothing to do.
    pub fn creates(mode: u32) -> bool {
        mode & PUNCH_HOLE == 0 && mode != (ZERO_RANGE | KEEP_SIZE)
    }
}

/// `Scrub` flags.
pub mod scrub {
    /// The first request of a pass to this server.
    pub const FIRST: u32 = 1;
    /// The last request of a pass to this server: it reached every datafile.
    pub const LAST: u32 = 2;
}

/// `SetXattr` flag: fail with EEXIST if the attribute exists.
pub const XATTR_CREATE: u32 = 1;
/// `SetXattr` flag: fail with ENODATA if the attribute does not exist.
pub const XATTR_REPLACE: u32 = 2;
/// Longest extended attribute name, in bytes.
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value, in bytes.
pub const XATTR_SIZE_MAX: usize = 65536;

impl Response {
    /// An error reply whose kind is what `errno` alone stands for
    /// ([`ErrorKind::of`]).
    pub fn error(errno: Errno, message: impl Into<String>) -> Response {
        Response::failure(ErrorKind::of(errno), errno, message)
    }

    /// An error reply of a given kind.
    pub fn failure(kind: ErrorKind, errno: Errno, message: impl Into<String>) -> Response {
        Response::Error {
            errno: errno.0,
            kind,
            message: message.into(),
        }
    }
}

/// Names one mutation across its retries: a random id per client and a sequence
/// number. A server that already did the mutation answers a retry with the reply it
/// recorded in the same commit, so a retried create after a lost reply neither fails
/// with EEXIST nor happens twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryKey {
    /// Random per client instance.
    pub client: u64,
    /// Increasing per client instance.
    pub seq: u64,
}
wire_struct!(RetryKey {
    client: u64,
    seq: u64
});

/// One change a server made, in its change feed (`Request::Changes`): what clients
/// that cache names and attributes must forget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Changed {
    /// An object whose attributes or contents changed (a datafile's, on a data
    /// server: its file's size and times changed).
    pub handle: Handle,
    /// A directory entry that was added, removed or changed (the name's meaning).
    pub entry: Option<(Handle, String)>,
}
wire_struct!(Changed {
    handle: Handle,
    entry: Option<(Handle, String)>,
});

/// The body of a request frame: who asks, what, and (for mutations) its retry key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestBody {
    /// The caller's credentials.
    pub creds: Creds,
    /// The operation.
    pub request: Request,
    /// Present on mutations that may be retried.
    pub retry: Option<RetryKey>,
    /// The client instance a key-holding node acts for (a server's step of that
    /// client's request), whose own changes its change feed does not hand back to
    /// it; 0 for the connection's own client. Ignored from a user's connection.
    pub origin: u64,
}
wire_struct!(RequestBody {
    creds: Creds,
    request: Request,
    retry: Option<RetryKey>,
    origin: u64,
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};
    use crate::regions::Extent;

    #[test]
    fn a_sync_of_metadata_alone_is_about_a_group_one_with_data_about_the_server() {
        let meta = Request::Sync(req::Sync { data: false });
        let all = Request::Sync(req::Sync { data: true });
        assert_eq!(meta.kind_scope(), Scope::Server);
        assert_eq!(meta.scope(), Scope::Group);
        assert_eq!(all.scope(), Scope::Server);
        // Every other request is what its kind declares.
        let widen = Request::Widen(req::Widen {
            handle: 1,
            width: 2,
            cap: None,
        });
        assert_eq!(widen.scope(), widen.kind_scope());
    }

    #[test]
    fn requests_round_trip() {
        let reqs = vec![
            Request::Ping(req::Ping {}),
            Request::Lookup(req::Lookup {
                dir: 1,
                name: "x".into(),
                want: crate::cap::rights::READ,
            }),
            Request::Write(req::Write {
                copies: Default::default(),
                handle: 5,
                stripe: Stripe {
                    size: 65536,
                    count: 4,
                },
                index: 2,
                regions: Regions::List(vec![Extent { offset: 1, len: 2 }]),
                sync: false,
                cap: Some(Capability {
                    handle: 5,
                    rights: 2,
                    uid: 7,
                    expires: 9,
                    mac: vec![1; 16],
                }),
            }),
            Request::Create(req::Create {
                hold: 0,
                parent: 1,
                name: "d".into(),
                mode: 0o755,
                umask: 0,
                uid: 0,
                gid: 0,
                what: CreateWhat::Dir {
                    shards: 2,
                    default_layout: None,
                },
            }),
        ];
        for r in reqs {
            let body = RequestBody {
                creds: Creds::default(),
                request: r,
                retry: Some(RetryKey { client: 7, seq: 9 }),
                origin: 0x42,
            };
            assert_eq!(decode::<RequestBody>(&encode(&body)).unwrap(), body);
        }
        let resp = Response::error(Errno::ENOENT, "gone");
        assert_eq!(decode::<Response>(&encode(&resp)).unwrap(), resp);
        assert_eq!(Request::Ping(req::Ping {}).op_name(), "Ping");
        assert!(decode::<Request>(&[0xff, 0xff]).is_err());
    }
}
