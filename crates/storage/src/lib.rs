//! The storage layer of a pvfs server (docs/storage-format.md).
//!
//! - [`MetaStore`]: the metadata store, one redb database per server holding objects
//!   (attributes), directory entries, rmdir seals, pools of pre-created datafile
//!   handles and a superblock. Reads are snapshots on the caller's thread; writes go
//!   through one writer thread that group-commits concurrent mutations (one durable
//!   commit, one fsync, for many creates) while keeping each mutation atomic. Commits
//!   are made durable through a redo log under the database ([`redo::LoggedFile`]).
//! - [`FileData`]: the data store, one local file per datafile handle, read and written
//!   with positioned I/O through a small cache of open files, with a log of which
//!   datafiles it ever created (`born.rs`), so a lost datafile is told from a hole, and
//!   removed datafiles kept emptied for reuse (`spares.rs`), and a checksum of every
//!   block of every datafile, checked on each read (`sums.rs`). The server uses it
//!   through the blocking [`DataBackend`] trait (from `spawn_blocking`), the seam where
//!   tests inject faults ([`fault::FaultyData`]).
//!
//! - [`LockMark`]: whether clients may have held locks when the server stopped (the
//!   lock table is in memory; a restart then waits for reclaims).
//!
//! The on-disk format is documented in `docs/storage-format.md`.

mod born;
mod data;
mod disk_id;
mod error;
pub mod fault;
mod gate;
mod lockmark;
mod marker;
mod meta;
pub mod redo;
pub mod sim;
mod spares;
mod standby;
pub mod sums;
mod txn;

pub use born::{BORN_FILE, BORN_VERSION};
pub use data::{DataBackend, FileData, FsSpace, FD_CACHE_SIZE};
pub use disk_id::{disk_id, DISK_ID_FILE};
pub use error::{MetaError, MutationError, StorageError};
pub use gate::SlowGate;
pub use lockmark::{LockMark, LOCK_MARK_FILE};
pub use marker::GroupMarker;
pub use meta::{
    CommitStats, Identity, MetaStore, OpenDisks, ReadView, ReplicatedFuture, Replicator,
    StoreFailure, StoreHealth, Superblock, BATCH_MAX, FORMAT_VERSION, QUEUE_MAX, RESERVED_HANDLES,
};
pub use redo::{LogFlusher, LogShipper, RecordTap, SyncPolicy};
pub use spares::{SPARES_MAX, SPARE_DIR};
pub use standby::{StandbyError, StandbyStore};
pub use txn::MetaTxn;
