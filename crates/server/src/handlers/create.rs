//! `Create`: a file, directory or symlink and its directory entry, in one commit on
//! the server holding the entry's shard (so a create is one round trip).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pvfs_proto::access;
use pvfs_proto::acl::{self, Acl};
use pvfs_proto::layout::{
    check_stripe_size, Datafile, Layout, LayoutSpec, MAX_REPLICAS, MAX_STRIPE_COUNT, NO_SERVER,
};
use pvfs_proto::types::{check_name, PATH_MAX};
use pvfs_proto::{
    req, rights, Attr, Changed, CreateWhat, Creds, Errno, NodeKind, ObjDetail, Response, Timespec,
};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::feed::entry;
use crate::handlers::lookup;
use crate::handlers::sealed;
use crate::op::{Access, Answer, Cx, Handler};

/// Most dirdata shards one directory may have.
pub const MAX_SHARDS: u32 = 1024;

/// What the commit will build, decided before it (layout checks, pool refills).
#[derive(Clone)]
enum Plan {
    File {
        stripe_size: u64,
        /// The server of each datafile's first copy (its handle comes from that
        /// server's pool).
        servers: Vec<u32>,
        /// Copies of each stripe unit.
        replicas: u32,
        /// The servers of each datafile's other copies, in chain order.
        copies: Vec<[u32; MAX_REPLICAS as usize - 1]>,
    },
    Dir {
        shards: u32,
        default_layout: Option<LayoutSpec>,
    },
    Symlink {
        target: String,
    },
    Node {
        kind: NodeKind,
        rdev: u64,
    },
}

/// Creates an object and its entry `name` in `parent` (the caller needs write and
/// search permission on `parent`). The object belongs to `uid` (only root may name
/// another user) and group `gid` (one of the caller's, unless root), except in a
/// set-group-ID directory, whose group it takes (a directory also takes the bit). Its
/// mode is `mode` without `umask`, or, when `parent` has a default ACL, `mode`
/// narrowed by that ACL, which it inherits (a directory also as its default ACL). A
/// regular file's creator gets read and write capabilities, whatever the new mode
/// (as open(2) with O_CREAT).
impl Handler for req::Create {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        vec![entry(self.parent, &self.name)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        create(&cx, self).await.map(Answer::Reply)
    }
}

/// Handles `Create`.
async fn create(cx: &Cx<'_>, r: req::Create) -> OpResult<Response> {
    let (ctx, caller) = (cx.ctx, cx.caller);
    let req::Create {
        parent,
        name,
        mode,
        umask,
        uid,
        gid,
        what,
        hold,
    } = r;
    ctx.require_meta()?;
    check_name(&name).map_err(|e| OpError::invalid(e, format!("invalid name {name:?}")))?;
    let creds = &caller.creds;
    if creds.uid != 0 && uid != creds.uid {
        return Err(OpError::denied(
            Errno::EPERM,
            "only root may create objects for another user",
        ));
    }
    // As open(2) and mkdir(2): a name that exists is EEXIST whether or not the caller
    // may write the directory (searching it is enough to see the name), so the write
    // permission is checked in the commit, after the name (and a retry's recorded
    // answer).
    let parent_attr = lookup::search(ctx, caller, parent).await?;
    lookup::check_placement(ctx, &parent_attr, &name)?;
    let may_write = access::check(&parent_attr, creds, access::MAY_WRITE);
    let is_dir = matches!(what, CreateWhat::Dir { .. });
    let (gid, mode) = if parent_attr.mode & 0o2000 != 0 {
        access::new_object_group(&parent_attr, creds, mode, is_dir)
    } else {
        if creds.uid != 0 && !access::in_group(creds, gid) {
            return Err(OpError::denied(
                Errno::EPERM,
                format!("only root may create objects for a group it is not in ({gid})"),
            ));
        }
        (gid, mode)
    };
    let (mode, acl) = inherited_acl(&parent_attr, mode, umask, is_dir);
    let mut plan = plan(ctx, creds, what)?;
    stock_pools(ctx, &mut plan).await?;
    let range = ctx.config.servers[ctx.me].handles;
    let admission = Arc::new(sealed::gate(ctx, parent).await?);
    // A file the caller opens: held before its name is visible (`crate::holds`).
    let holder = (hold != 0 && matches!(plan, Plan::File { .. }))
        .then(|| (ctx.holds.clone(), (caller.lock_who(), caller.origin), hold));
    if let Some((_, (who, client), _)) = &holder {
        // The hold lives under the client's lease, which this starts or renews.
        ctx.locks.touch_client(*who, *client);
    }
    let mut attempts = 0;
    let created = loop {
        attempts += 1;
        let attempt_plan = plan.clone();
        let acl = acl.clone();
        let name = name.clone();
        let minter = ctx.clone();
        let creator = creds.uid;
        let holder_in = holder.clone();
        let admission = admission.clone();
        let held = Arc::new(std::sync::Mutex::new(None));
        let held_in = held.clone();
        let result = cx
            .once
            .commit(&ctx.meta, move |t| {
                admission.check(t)?;
                if t.get_entry(parent, &name)?.is_some() {
                    return Err(OpError::posix(Errno::EEXIST, format!("{name:?} exists")));
                }
                may_write.map_err(|e| {
                    OpError::denied(e, format!("no write permission on directory {parent:#x}"))
                })?;
                let handle = t.alloc_handles(1)?;
                debug_assert!(range.contains(handle));
                let now = Timespec::now();
                let (detail, perm, nlink, size) = match attempt_plan {
                    Plan::File {
                        stripe_size,
                        servers,
                        replicas,
                        copies,
                    } => {
                        let mut datafiles = Vec::with_capacity(servers.len());
                        for (s, copies) in servers.into_iter().zip(copies) {
                            let got = t.pool_take(s, 1)?;
                            let Some(&h) = got.first() else {
                                return Err(OpError::busy(
                                    Errno::EAGAIN,
                                    format!("precreate pool of server {s} is empty"),
                                ));
                            };
                            datafiles.push(Datafile {
                                server: s,
                                handle: h,
                                copies,
                            });
                        }
                        // Bytes start on the first datafile; writes past its
                        // stripe unit widen the file first (`Widen`).
                        let layout = Layout {
                            stripe_size,
                            replicas,
                            datafiles,
                            width: 1,
                        };
                        debug_assert!(layout
                            .datafiles
                            .iter()
                            .all(|d| { d.replicas().count() == replicas as usize }));
                        (ObjDetail::File { layout }, mode & 0o7777, 1, 0)
                    }
                    Plan::Dir {
                        shards,
                        default_layout,
                    } => (
                        ObjDetail::Dir {
                            parent,
                            shards,
                            default_layout,
                            mtime_set: Timespec::default(),
                        },
                        mode & 0o7777,
                        2,
                        4096,
                    ),
                    Plan::Symlink { target } => {
                        let len = target.len() as u64;
                        (ObjDetail::Symlink { target }, 0o777, 1, len)
                    }
                    Plan::Node { kind, rdev } => {
                        (ObjDetail::Node { kind, rdev }, mode & 0o7777, 1, 0)
                    }
                };
                let attr = Attr {
                    handle,
                    mode: perm,
                    uid,
                    gid,
                    nlink,
                    size,
                    atime: now,
                    mtime: now,
                    ctime: now,
                    detail,
                    blocks: 0,
                    acl,
                };
                let kind = attr.kind();
                t.put_object(&attr);
                t.put_entry(parent, &name, handle, kind, now)?;
                if let Some((holds, client, gen)) = &holder_in {
                    holds.hold(*client, handle, *gen)?;
                    *held_in.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
                }
                let caps = if kind == pvfs_proto::ObjKind::File {
                    minter
                        .caps
                        .grant(&attr, rights::READ | rights::WRITE, creator)
                } else {
                    Vec::new()
                };
                Ok(Response::Created { attr, caps })
            })
            .await;
        if result.is_err() {
            // The object was never made: its hold goes.
            let h = *held.lock().unwrap_or_else(|p| p.into_inner());
            if let (Some(h), Some((holds, client, gen))) = (h, &holder) {
                holds.unhold(*client, h, *gen);
            }
        }
        match result {
            Ok(created) => break created,
            Err(e) if e.kind == pvfs_proto::ErrorKind::Busy && attempts < 4 => {
                // Another create drained a pool between our refill and our commit.
                stock_pools(ctx, &mut plan).await?;
            }
            Err(e) => return Err(e),
        }
    };
    if let Plan::File { servers, .. } = &plan {
        for &s in servers {
            ctx.precreate.top_up_later(s as usize);
        }
    }
    if holder.is_some() {
        if let Err(e) = ctx.locks.ensure_marked(ctx.exec).await {
            tracing::warn!("a new file is held without the mark a restart would honour: {e}");
        }
    }
    Ok(created)
}

/// Makes sure the pool of each datafile's first server holds a handle for it. A
/// datafile with copies whose first server's pool cannot be refilled (the server is
/// down) takes its handle from another copy's server, which then comes first: every
/// copy keeps the one handle, so creates go on while a server is down.
async fn stock_pools(ctx: &Ctx, plan: &mut Plan) -> OpResult<()> {
    let Plan::File {
        servers, copies, ..
    } = plan
    else {
        return Ok(());
    };
    for (first, others) in servers.iter_mut().zip(copies.iter_mut()) {
        let Err(e) = ctx.precreate.ensure(*first as usize, 1).await else {
            continue;
        };
        let mut stocked = false;
        for other in others.iter_mut().filter(|s| **s != NO_SERVER) {
            if ctx.precreate.ensure(*other as usize, 1).await.is_ok() {
                std::mem::swap(first, other);
                stocked = true;
                break;
            }
        }
        if !stocked {
            return Err(e);
        }
    }
    Ok(())
}

/// The mode and ACLs of an object created with `mode` in directory `parent`: without
/// a default ACL there, `mode` less `umask`; with one, the access ACL and mode it
/// gives (`pvfs_proto::acl::inherit`; the umask does not apply), and for a directory
/// the same default ACL.
fn inherited_acl(parent: &Attr, mode: u32, umask: u32, is_dir: bool) -> (u32, Option<Box<Acl>>) {
    let default = parent
        .acl
        .as_deref()
        .map(|a| &a.default)
        .filter(|d| !d.is_empty());
    let Some(default) = default else {
        return (mode & !(umask & 0o777), None);
    };
    let (access, mode) = acl::inherit(default, mode);
    let acl = Acl {
        access,
        default: if is_dir { default.clone() } else { Vec::new() },
    };
    (mode, (!acl.is_empty()).then(|| Box::new(acl)))
}

fn plan(ctx: &Ctx, creds: &Creds, what: CreateWhat) -> OpResult<Plan> {
    match what {
        CreateWhat::File { spec } => resolve_layout(ctx, spec),
        CreateWhat::Dir {
            shards,
            default_layout,
        } => {
            if shards == 0 || shards > MAX_SHARDS {
                return Err(OpError::invalid(
                    Errno::EINVAL,
                    format!("directory shard count {shards} outside 1..={MAX_SHARDS}"),
                ));
            }
            if let Some(spec) = default_layout {
                check_spec(ctx, spec)?;
            }
            Ok(Plan::Dir {
                shards,
                default_layout,
            })
        }
        CreateWhat::Symlink { target } => {
            if target.is_empty() {
                return Err(OpError::posix(Errno::ENOENT, "empty symlink target"));
            }
            if target.len() >= PATH_MAX || target.contains('\0') {
                return Err(OpError::invalid(
                    Errno::ENAMETOOLONG,
                    "symlink target too long",
                ));
            }
            Ok(Plan::Symlink { target })
        }
        CreateWhat::Node { kind, .. } if kind.is_device() && creds.uid != 0 => Err(
            OpError::denied(Errno::EPERM, "only root may create device nodes"),
        ),
        CreateWhat::Node { kind, rdev } => Ok(Plan::Node {
            kind,
            rdev: if kind.is_device() { rdev } else { 0 },
        }),
    }
}

/// Checks a layout request against the file system (stripe size, count, base,
/// copies).
pub fn check_spec(ctx: &Ctx, spec: LayoutSpec) -> OpResult<()> {
    let n = ctx.config.data_servers().len() as u32;
    if let Some(r) = spec.replicas {
        if r == 0 || r > MAX_REPLICAS {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("{r} copies: a file has 1 to {MAX_REPLICAS}"),
            ));
        }
        if r > n {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("{r} copies: the file system has {n} data servers"),
            ));
        }
        if r > 1 && !ctx.lease.configured() {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!(
                    "{r} copies: the file system has no authority to say which copies \
                     are up (configuration: [replication] authority)"
                ),
            ));
        }
    }
    if let Some(size) = spec.stripe_size {
        check_stripe_size(size).map_err(|e| {
            OpError::invalid(
                e,
                format!(
                    "stripe size {size} outside {}..={}",
                    pvfs_proto::layout::MIN_STRIPE_SIZE,
                    pvfs_proto::layout::MAX_STRIPE_SIZE
                ),
            )
        })?;
    }
    if let Some(count) = spec.stripe_count {
        if count == 0 || count > n.min(MAX_STRIPE_COUNT) {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("stripe count {count}: the file system has {n} data servers"),
            ));
        }
    }
    if let Some(base) = spec.base {
        if base >= n {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("first data server {base}: the file system has {n} data servers"),
            ));
        }
    }
    Ok(())
}

/// The data servers a new file's datafiles go round: those of the configuration,
/// but, for a file whose first server is left to the file system, without the
/// servers the map calls lost or that are being drained (their heirs would stand
/// in for them, and a one-copy datafile there could not be written, or would be
/// lost with the drained server), and servers added to the configuration that the
/// map does not have yet or that never came up; its width is then at most theirs.
fn placement_servers(ctx: &Ctx, spec: LayoutSpec) -> Vec<usize> {
    let all = ctx.config.data_servers();
    if spec.base.is_some() {
        return all;
    }
    let Ok(map) = ctx.lease.map() else {
        return all;
    };
    let live: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&s| {
            map.servers
                .get(s)
                .is_some_and(|e| !e.state.gone() && !e.leaving && !e.added())
        })
        .collect();
    let copies = spec.replicas.unwrap_or(1).max(1) as usize;
    if live.len() < copies {
        all
    } else {
        live
    }
}

/// Fills a layout request with the defaults and picks its data servers
/// (round-robin from the base, as PVFS's base/pcount) and the servers of each
/// datafile's other copies (`Config::replica_set`).
fn resolve_layout(ctx: &Ctx, spec: LayoutSpec) -> OpResult<Plan> {
    let spec = spec.or(LayoutSpec {
        replicas: Some(ctx.config.replication.replicas),
        ..LayoutSpec::default()
    });
    check_spec(ctx, spec)?;
    let data = placement_servers(ctx, spec);
    let n = data.len();
    let size = spec.stripe_size.unwrap_or(ctx.config.defaults.stripe_size);
    let count = spec
        .stripe_count
        .unwrap_or(ctx.config.defaults.stripe_count)
        .clamp(1, n as u32) as usize;
    let base = match spec.base {
        Some(b) => b as usize,
        None => (ctx.next_base.fetch_add(1, Ordering::Relaxed) % n as u64) as usize,
    };
    let replicas = spec.replicas.unwrap_or(1);
    let mut servers = Vec::with_capacity(count);
    let mut copies = Vec::with_capacity(count);
    for i in 0..count {
        let set = ctx
            .config
            .replica_set(&data, (base + i) % n, replicas as usize);
        debug_assert_eq!(set.len(), replicas as usize, "checked against n");
        servers.push(set[0]);
        let mut rest = [NO_SERVER; MAX_REPLICAS as usize - 1];
        for (slot, &s) in rest.iter_mut().zip(&set[1..]) {
            *slot = s;
        }
        copies.push(rest);
    }
    Ok(Plan::File {
        stripe_size: size,
        servers,
        replicas,
        copies,
    })
}
